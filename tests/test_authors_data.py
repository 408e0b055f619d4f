"""The authors' tokenised datasets (``source: authors``): local copies with exactly their features,
stored with ``save_to_disk`` and as a parquet folder ``load_dataset`` reads, go through ``elf prepare``
and the DAG's ``prepare`` rule; every row, mask and reference equals a hand-built expectation of the
authors' collate (OWT rows padded with the pad id; conditional ``[source[:cap] ; target]`` EOS-padded,
no EOS appended) for all three tasks, XSum at 1024 + 64. The Hub path (load_dataset, then
snapshot_download + load_from_disk) runs with stand-ins: nothing touches the network."""

import json
import subprocess
import zlib
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
import yaml

from elf.cli import ElfError
from elf.cli import main as elf_main
from elf.config import ConfigError, DatasetSettings
from elf.validate import parse_experiment
from elf.data import authors
from elf.data.loaders import DataError, load_raw
from elf.flow.objective import loss_mask
from elf.stages import prepare as prepare_stage

ROOT = Path(__file__).resolve().parents[1]
Value, List = datasets.Value, datasets.List
# The features of embedded-language-flows/{wmt14_de-en,xsum}_{train,validation}_t5 (their
# dataset_info.json) and of embedded-language-flows/openwebtext-t5.
CONDITIONAL_FEATURES = datasets.Features({
    "input": Value("string"), "target": Value("string"), "index": Value("int64"),
    "condition_input_ids": List(Value("int64")), "condition_sequence_length": Value("int64"),
    "input_ids": List(Value("int32")), "sequence_length": Value("int64")})
OWT_FEATURES = datasets.Features({"input_ids": List(Value("int32"))})
LAYOUTS = {"xsum": (1088, 1024), "wmt": (128, 64)}   # (max_length, max_input_length), spec §2
# (source, target) lengths per task: over and under each cap, and an empty target
PAIR_LENGTHS = {"xsum": [(1030, 70), (10, 5), (1024, 64), (3, 0)],
                "wmt": [(70, 80), (5, 7), (64, 1)]}
OWT_LENGTHS = [1024, 300, 1, 1500, 17, 2, 999]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from elf.data.tokenizer import train_tokenizer

    path = tmp_path_factory.mktemp("tok")
    texts = ["the cat sat on the mat", "a dog ran in the park", "hello world again and again",
             "der hund lief im park", "die katze sass auf der matte"] * 3
    train_tokenizer(texts, 60).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tok(tokenizer_dir):
    from elf.data.tokenizer import load_tokenizer

    return load_tokenizer(str(tokenizer_dir))


def fake_ids(n: int, seed: int, vocab: int) -> list[int]:
    return np.random.default_rng(seed).integers(3, vocab, n).tolist()


def pair_rows(task: str, split: str, vocab: int) -> list[dict]:
    rows = []
    for index, (n_src, n_tgt) in enumerate(PAIR_LENGTHS[task]):
        seed = zlib.crc32(f"{task}/{split}/{index}".encode())
        src, tgt = fake_ids(n_src, seed, vocab), fake_ids(n_tgt, seed + 1, vocab)
        rows.append({"input": f"{task} {split} source {index}", "target": f"{task} {split} ref {index}",
                     "index": index, "condition_input_ids": src, "condition_sequence_length": n_src,
                     "input_ids": tgt, "sequence_length": n_tgt})
    return rows


def store(rows: list[dict], features, folder: Path, how: str) -> Path:
    """One split as the authors' repos hold it: a save_to_disk folder, or a parquet folder."""
    data = datasets.Dataset.from_list(rows, features=features)
    if how == "save_to_disk":
        data.save_to_disk(str(folder))
    else:
        (folder / "data").mkdir(parents=True)
        data.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    return folder


def raw_test(folder: Path, task: str) -> Path:
    """The raw dataset the test split comes from (their repos hold train and validation only)."""
    folder.mkdir(parents=True, exist_ok=True)
    words = ["the cat sat on the mat again", "a dog ran", "hello world"]
    rows = [{"source": f"{w} {task} source", "target": f"{w} ref"} for w in words]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def authors_sets(root: Path, how: str, vocab: int) -> dict[str, dict]:
    """Dataset settings of the three tasks on local copies of the authors' sets."""
    owt = [{"input_ids": fake_ids(n, 100 + i, vocab)} for i, n in enumerate(OWT_LENGTHS)]
    store(owt, OWT_FEATURES, root / "openwebtext-t5", how)
    out = {"owt": dict(task="unconditional", source="authors", name=str(root / "openwebtext-t5"),
                       max_length=1024)}
    for task, kind in (("xsum", "summarization"), ("wmt", "translation")):
        for split in ("train", "validation"):
            store(pair_rows(task, split, vocab), CONDITIONAL_FEATURES, root / f"{task}_{split}_t5", how)
        max_length, max_input = LAYOUTS[task]
        out[task] = dict(task=kind, source="authors", name=str(root / f"{task}_{{split}}_t5"),
                         max_length=max_length, max_input_length=max_input,
                         target_length=max_length - max_input,
                         test={"source": "local", "name": str(raw_test(root / f"raw_{task}", task))})
    return out


def prepare(settings: dict, tokenizer_dir, out: Path, carve: int = 2) -> datasets.DatasetDict:
    assert elf_main(["prepare", "--settings", json.dumps(settings), "--tokenizer", str(tokenizer_dir),
                     "--carve-docs", str(carve), "--out", str(out)]) == 0
    return datasets.load_from_disk(str(out))


# --------------------------------------------------------------------------------------------------
# Hand-built expectations: the authors' collate, written out
# --------------------------------------------------------------------------------------------------

def expected_pair_row(src, tgt, max_length, max_input, eos):
    src = list(src[:max_input])
    ids = (src + list(tgt))[:max_length]
    return {"input_ids": ids + [eos] * (max_length - len(ids)),
            "attention_mask": [1] * len(ids) + [0] * (max_length - len(ids)),
            "cond_seq_mask": [1] * len(src) + [0] * (max_length - len(src)),
            "source_length": len(src),
            # loss: every target position, EOS padding included; no source position
            "loss": [0] * len(src) + [1] * (max_length - len(src))}


def expected_owt_row(ids, max_length, pad):
    kept = list(ids[:max_length])
    return {"input_ids": kept + [pad] * (max_length - len(kept)),
            "attention_mask": [1] * len(kept) + [0] * (max_length - len(kept)),
            "loss": [1] * len(kept) + [0] * (max_length - len(kept))}


def loss_of(row: dict, task: str) -> list[int]:
    """The training loss mask of a packed row (elf.flow.objective, as the train stage calls it)."""
    batch = {k: torch.tensor([row[k]]) for k in ("attention_mask", "cond_seq_mask")}
    return loss_mask(batch, loss_covers_padding=task != "unconditional")[0].int().tolist()


def check_conditional(data, task, tok, raw_root: Path):
    max_length, max_input = LAYOUTS[task]
    kind = "unconditional" if task == "owt" else "conditional"
    for split in ("train", "validation"):
        rows = pair_rows(task, split, len(tok))
        assert len(data[split]) == len(rows)
        for got, row in zip(data[split], rows):
            want = expected_pair_row(row["condition_input_ids"], row["input_ids"], max_length,
                                     max_input, tok.eos_token_id)
            for key in ("input_ids", "attention_mask", "cond_seq_mask", "source_length"):
                assert got[key] == want[key], (task, split, key)
            assert loss_of(got, kind) == want["loss"]
            assert (got["source_text"], got["reference"]) == (row["input"], row["target"])
    # the test split: raw text tokenised without special tokens, laid out the same way
    raw = [json.loads(line) for line in (raw_root / "test.jsonl").read_text().splitlines()]
    assert data["test"]["reference"] == [r["target"] for r in raw]
    for got, row in zip(data["test"], raw):
        src, tgt = (tok(row[c], add_special_tokens=False)["input_ids"] for c in ("source", "target"))
        want = expected_pair_row(src, tgt, max_length, max_input, tok.eos_token_id)
        assert {k: got[k] for k in ("input_ids", "attention_mask", "cond_seq_mask")} == \
            {k: want[k] for k in ("input_ids", "attention_mask", "cond_seq_mask")}


def check_owt(data, tok, carve: int):
    rows = [fake_ids(n, 100 + i, len(tok)) for i, n in enumerate(OWT_LENGTHS)]
    end = len(rows)
    carved = {}
    for split in ("validation", "test", "heldout"):   # carved from the end of train, in this order
        carved[split] = rows[end - carve:end]
        end -= carve
    assert list(data) == ["train", "validation", "test"]
    for split, want_rows in (("train", rows[:end]), ("validation", carved["validation"]),
                             ("test", carved["test"])):
        assert len(data[split]) == len(want_rows)
        for got, ids in zip(data[split], want_rows):
            want = expected_owt_row(ids, 1024, tok.pad_token_id)
            assert got["input_ids"] == want["input_ids"] and got["attention_mask"] == want["attention_mask"]
            assert loss_of(got, "unconditional") == want["loss"] and got["source_length"] == 0
            assert got["text"] == tok.decode(ids[:1024], skip_special_tokens=True)


@pytest.mark.parametrize("how", ["save_to_disk", "parquet"])
def test_prepare_lays_out_the_authors_sets_as_their_collate(how, tmp_path, tokenizer_dir, tok):
    sets = authors_sets(tmp_path / "authors", how, len(tok))
    check_owt(prepare(sets["owt"], tokenizer_dir, tmp_path / "owt"), tok, carve=2)
    for task in ("xsum", "wmt"):
        data = prepare(sets[task], tokenizer_dir, tmp_path / task)
        check_conditional(data, task, tok, tmp_path / "authors" / f"raw_{task}")
    record = json.loads((tmp_path / "xsum" / "provenance.json").read_text())
    assert record["settings"]["source"] == "authors" and record["settings"]["target_length"] == 64


def test_the_dags_prepare_rule_reads_the_authors_sets(tmp_path, tokenizer_dir, tok):
    """`snakemake <R>/data/<dataset>/tokens` on a config naming the authors' sets (and a local
    tokenizer by path, as the paper config names t5-small) gives the hand-built rows. (OWT is left
    to the stage test: the rule carves 5,000 rows per missing split.)"""
    sets = authors_sets(tmp_path / "authors", "save_to_disk", len(tok))
    sets.pop("owt")
    sets["owt"] = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())["datasets"]["owt"]
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["results"], cfg["reports"] = str(tmp_path / "results"), str(tmp_path / "reports")
    cfg["tokenizer"] = {"source": "pretrained", "name_or_path": str(tokenizer_dir)}
    cfg["datasets"] = sets
    parse_experiment(cfg)
    configfile = tmp_path / "authors.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    targets = [f"{tmp_path}/results/data/{name}/tokens" for name in ("xsum", "wmt")]
    proc = subprocess.run(["snakemake", "--cores", "2", *targets, "--configfile", str(configfile)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rule corpora" not in proc.stdout + proc.stderr   # nothing generated: the sets are read
    for task in ("xsum", "wmt"):
        data = datasets.load_from_disk(f"{tmp_path}/results/data/{task}/tokens")
        check_conditional(data, task, tok, tmp_path / "authors" / f"raw_{task}")


# --------------------------------------------------------------------------------------------------
# The Hub path and errors
# --------------------------------------------------------------------------------------------------

def test_hub_sets_fall_back_to_snapshot_download_and_load_from_disk(tmp_path, monkeypatch, tok):
    saved = store(pair_rows("xsum", "train", len(tok)), CONDITIONAL_FEATURES, tmp_path / "snap",
                  "save_to_disk")
    calls = []

    def offline(ref, **kwargs):
        calls.append(("load_dataset", ref, kwargs))
        raise ConnectionError("offline")

    def snapshot(repo_id, repo_type, revision):
        calls.append(("snapshot_download", repo_id, repo_type, revision))
        return str(saved)

    import huggingface_hub
    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    ds = authors.read_split("embedded-language-flows/xsum_train_t5", revision="abc123")
    assert calls == [("load_dataset", "embedded-language-flows/xsum_train_t5", {"revision": "abc123"}),
                     ("snapshot_download", "embedded-language-flows/xsum_train_t5", "dataset", "abc123")]
    assert ds["condition_input_ids"][0] == pair_rows("xsum", "train", len(tok))[0]["condition_input_ids"]

    # load_dataset "succeeds" by reading the folder's JSON files as rows: the authors' check
    listing = datasets.Dataset.from_dict({"_data_files": [[{"filename": "x.arrow"}]], "_fingerprint": ["f"]})
    monkeypatch.setattr(datasets, "load_dataset", lambda ref, **kw: datasets.DatasetDict({"train": listing}))
    assert authors.read_split("embedded-language-flows/xsum_train_t5").column_names[0] == "input"

    def gone(repo_id, repo_type, revision):
        raise OSError("repo not found")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", gone)
    with pytest.raises(authors.AuthorsDataError, match="xsum_train_t5.*offline.*repo not found"):
        authors.read_split("embedded-language-flows/xsum_train_t5")


def test_missing_columns_and_foreign_ids_are_named(tmp_path, tokenizer_dir, tok):
    rows = [{k: v for k, v in r.items() if k != "target"} for r in pair_rows("wmt", "train", len(tok))]
    features = datasets.Features({k: v for k, v in CONDITIONAL_FEATURES.items() if k != "target"})
    store(rows, features, tmp_path / "wmt_train_t5", "save_to_disk")
    settings = dict(task="translation", source="authors", name=str(tmp_path / "wmt_{split}_t5"),
                    max_length=128, max_input_length=64)
    store(pair_rows("wmt", "validation", len(tok)), CONDITIONAL_FEATURES, tmp_path / "wmt_validation_t5",
          "save_to_disk")
    with pytest.raises(DataError, match="missing text column 'target'"):
        load_raw(DatasetSettings(**settings))
    big = [{"input_ids": [3, 4, len(tok) + 7]}] * 6
    store(big, OWT_FEATURES, tmp_path / "owt_big", "parquet")
    with pytest.raises(ElfError, match=f"token id {len(tok) + 7} is beyond the tokenizer's {len(tok)} ids"):
        args = type("A", (), dict(settings=json.dumps(dict(task="unconditional", source="authors",
                                                           name=str(tmp_path / "owt_big"), max_length=8)),
                                  tokenizer=str(tokenizer_dir), raw_root=None, carve_docs=1,
                                  num_proc=1, out=str(tmp_path / "out")))
        prepare_stage.run(args)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dataset, change, message", [
    ("xsum", dict(max_input_length=64), "leaves 1024 target tokens"),   # the old 64 + 1024 layout
    ("xsum", dict(max_input_length=1088), "needs a source cap below max_length 1088"),
    ("owt", dict(target_length=64), "only conditional datasets have a target"),
    ("xsum", dict(source="hub", name="EdinburghNLP/xsum"), "a raw test split is for source 'authors'"),
])
def test_config_refuses_a_layout_whose_target_is_not_the_stated_length(dataset, change, message):
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    cfg["datasets"][dataset].update(change)
    with pytest.raises(ConfigError, match=message):
        parse_experiment(cfg)
