"""Sharded, parallel, resumable ``elf prepare`` (elf/stages/prepare.py, elf/data/shards.py, StreamPacker in elf/data/pack.py).

On the embedded corpora and a tokenizer trained here. Expected values are computed independently:
the raw train documents are cut into contiguous shards with ``np.array_split`` and each shard is
packed with ``pack_token_streams`` (the whole-corpus packer), or, for conditional data, the rows of a
one-shard run.
"""

import argparse
import json

import datasets
import numpy as np
import pytest

from elf.config import CorporaSettings, DatasetSettings
from elf.data.corpora import build_corpora
from elf.data.loaders import load_raw
from elf.data.pack import StreamPacker, pack_token_streams
from elf.data.tokenizer import load_tokenizer, train_tokenizer
from elf.artifacts import read_json
from elf.data import shards
from elf.stages import prepare

OWT = dict(task="unconditional", source="embedded", name="owt", max_length=32)
WMT = dict(task="translation", source="embedded", name="wmt", subset="de-en", max_length=48,
           max_input_length=24)
COLUMNS = ("input_ids", "attention_mask", "cond_seq_mask", "source_length")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepare_shards")
    corpora = build_corpora(CorporaSettings(seed=0, train_docs=30, validation_docs=5, test_docs=5))
    for name, splits in corpora.items():
        splits.save_to_disk(str(root / "corpora" / name))
    texts = list(corpora["owt"]["train"]["text"])
    texts += [p[lang] for p in corpora["wmt"]["train"]["translation"] for lang in ("de", "en")]
    train_tokenizer(texts, 300).save_pretrained(str(root / "tokenizer"))
    return root


def run_prepare(inputs, out, num_proc=1, **settings):
    parser = argparse.ArgumentParser()
    prepare.register(parser.add_subparsers())
    args = parser.parse_args(["prepare", "--settings", json.dumps(settings), "--tokenizer",
                              str(inputs / "tokenizer"), "--raw-root", str(inputs / "corpora"),
                              "--num-proc", str(num_proc), "--out", str(out)])
    args.func(args)
    return datasets.load_from_disk(str(out)), read_json(out / "provenance.json")


def rows(split) -> dict:
    return {c: np.asarray(split.with_format("numpy")[c]) for c in COLUMNS}


def expected_shard_packing(inputs, shards: int, max_length: int) -> tuple[dict, int, int]:
    """Rows of each contiguous train shard packed on its own, tokens in, and tail tokens dropped."""
    tok = load_tokenizer(str(inputs / "tokenizer"))
    texts = datasets.load_from_disk(str(inputs / "corpora" / "owt"))["train"]["text"]
    docs = tok(list(texts), add_special_tokens=False)["input_ids"]
    parts = [pack_token_streams([docs[i] for i in idx], tok.eos_token_id, tok.pad_token_id, max_length)
             for idx in np.array_split(np.arange(len(docs)), shards)]
    packed = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    tokens_in = sum(len(d) + 1 for d in docs)
    return packed, tokens_in, tokens_in - int(packed["attention_mask"].sum())


# --------------------------------------------------------------------------------------------------
# What sharding changes, and what it does not
# --------------------------------------------------------------------------------------------------

def test_conditional_rows_are_identical_for_one_and_three_shards(inputs, tmp_path):
    one, _ = run_prepare(inputs, tmp_path / "one", **WMT)
    three, record = run_prepare(inputs, tmp_path / "three", prepare_shards=3, **WMT)
    assert record["shards"]["train"]["shards"] == 3 and record["shards"]["test"]["shards"] == 1
    for split in ("train", "validation", "test"):
        a, b = one[split], three[split]
        assert a.num_rows == b.num_rows > 0
        for column in COLUMNS:
            np.testing.assert_array_equal(rows(a)[column], rows(b)[column], err_msg=f"{split} {column}")
        assert a["source_text"] == b["source_text"] and a["reference"] == b["reference"]
    assert not (tmp_path / "three.parts").exists()  # shard files are removed once gathered


@pytest.mark.parametrize("shards", [1, 3])
def test_unconditional_packs_within_each_shard_and_accounts_for_every_token(inputs, tmp_path, shards):
    data, record = run_prepare(inputs, tmp_path / "owt", prepare_shards=shards, **OWT)
    want, tokens_in, dropped = expected_shard_packing(inputs, shards, OWT["max_length"])
    got = rows(data["train"])
    for column in COLUMNS:
        np.testing.assert_array_equal(got[column], want[column], err_msg=column)
    train = record["shards"]["train"]
    assert train["shards"] == shards
    assert train["tokens_in"] == tokens_in                       # every document + one EOS each
    assert train["tail_tokens"] == dropped                       # each shard's ragged tail
    assert 0 <= dropped < shards * OWT["max_length"]
    assert record["real_tokens"]["train"] + train["tail_tokens"] == tokens_in
    tok = load_tokenizer(str(inputs / "tokenizer"))
    assert data["train"][2]["text"] == tok.decode(data["train"][2]["input_ids"], skip_special_tokens=True)


def test_one_shard_equals_packing_the_whole_split(inputs, tmp_path):
    data, _ = run_prepare(inputs, tmp_path / "owt", **OWT)
    tok = load_tokenizer(str(inputs / "tokenizer"))
    texts = datasets.load_from_disk(str(inputs / "corpora" / "owt"))["validation"]["text"]
    docs = tok(list(texts), add_special_tokens=False)["input_ids"]
    whole = pack_token_streams(docs, tok.eos_token_id, tok.pad_token_id, OWT["max_length"])
    np.testing.assert_array_equal(rows(data["validation"])["input_ids"], whole["input_ids"])


def test_process_count_does_not_change_the_bytes(inputs, tmp_path):
    run_prepare(inputs, tmp_path / "serial", prepare_shards=3, **OWT)
    run_prepare(inputs, tmp_path / "parallel", num_proc=2, prepare_shards=3, **OWT)
    for split in ("train", "validation", "test"):
        arrow = f"{split}/data-00000-of-00001.arrow"
        assert (tmp_path / "serial" / arrow).read_bytes() == (tmp_path / "parallel" / arrow).read_bytes()
    state = [read_json(tmp_path / d / "train" / "state.json")["_fingerprint"] for d in ("serial", "parallel")]
    assert state[0] == state[1]                                # the tokens' identity downstream


def test_train_cap_keeps_the_first_rows_of_the_shards(inputs, tmp_path):
    full, _ = run_prepare(inputs, tmp_path / "full", prepare_shards=3, **OWT)
    capped, record = run_prepare(inputs, tmp_path / "capped", prepare_shards=3, max_train_sequences=4, **OWT)
    assert capped["train"].num_rows == 4
    np.testing.assert_array_equal(rows(capped["train"])["input_ids"], rows(full["train"])["input_ids"][:4])
    assert record["real_tokens"]["train"] == 4 * OWT["max_length"]


def test_stream_packer_in_batches_equals_one_call():
    docs = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14], [15]]
    whole = pack_token_streams(docs, 1, 0, max_length=3)
    packer = StreamPacker(1, 0, max_length=3)
    batched = np.concatenate([packer.add(docs[:2]), packer.add(docs[2:3]), packer.add(docs[3:])])
    assert packer.finish()["input_ids"].shape == (0, 3)
    np.testing.assert_array_equal(batched, whole["input_ids"])
    assert packer.tail_tokens == sum(len(d) + 1 for d in docs) - whole["input_ids"].size  # 17 - 15


# --------------------------------------------------------------------------------------------------
# Resuming and gathering
# --------------------------------------------------------------------------------------------------

class Killed(Exception):
    pass


def plan(inputs, parts, **overrides):
    settings = DatasetSettings(**(OWT | {"prepare_shards": 3} | overrides))
    raw = load_raw(settings, inputs / "corpora")
    return shards.plan_shards(raw, settings, parts, "tok"), settings


def gathered_train(jobs):
    data, _ = shards.gather_split([j for j in jobs if j.split == "train"])
    return rows(data)


def test_killed_run_redoes_unfinished_shards_and_skips_finished_ones(inputs, tmp_path):
    tok = load_tokenizer(str(inputs / "tokenizer"))
    clean, settings = plan(inputs, tmp_path / "clean")
    shards.run_shards(clean, settings, tok)

    jobs, _ = plan(inputs, tmp_path / "parts")
    train = [j for j in jobs if j.split == "train"]

    def kill_after_first(job):
        raise Killed

    with pytest.raises(Killed):
        shards.run_shards(jobs, settings, tok, after_shard=kill_after_first)
    assert [j.done() for j in train] == [True, False, False]
    train[1].path.write_bytes(b"half-written")               # a shard killed mid-write: no marker
    stale = read_json(train[0].marker)                        # and a finished shard from other inputs:
    (train[2].marker).write_text(json.dumps(stale))            # its marker's identity does not match
    train[2].path.write_bytes(train[0].path.read_bytes())

    packed_now = shards.run_shards(jobs, settings, tok)
    assert {(j.split, j.index) for j in packed_now} == {("train", 1), ("train", 2), ("validation", 0),
                                                         ("test", 0)}
    got, want = gathered_train(jobs), gathered_train(clean)
    for column in COLUMNS:
        np.testing.assert_array_equal(got[column], want[column], err_msg=column)
    assert shards.run_shards(jobs, settings, tok) == []      # everything done: nothing repacked


def test_changed_settings_repack_every_shard(inputs, tmp_path):
    tok = load_tokenizer(str(inputs / "tokenizer"))
    jobs, settings = plan(inputs, tmp_path / "parts")
    shards.run_shards(jobs, settings, tok)
    longer, settings = plan(inputs, tmp_path / "parts", max_length=40)
    assert len(shards.run_shards(longer, settings, tok)) == len(longer)


def test_gather_refuses_a_missing_shard_and_names_it(inputs, tmp_path):
    tok = load_tokenizer(str(inputs / "tokenizer"))
    jobs, settings = plan(inputs, tmp_path / "parts")
    shards.run_shards(jobs, settings, tok)
    train = [j for j in jobs if j.split == "train"]
    train[2].marker.unlink()
    with pytest.raises(shards.ShardError) as err:
        shards.gather_split(train)
    message = str(err.value)
    assert "train shard 2 of 3" in message and str(train[2].path) in message
    assert "1 of 3 shards not done" in message and "shard 0" not in message
