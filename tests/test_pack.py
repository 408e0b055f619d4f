"""Packing (spec §2) on hand-made token lists, and the ``elf prepare`` stage end to end."""

import argparse
import filecmp
import json

import datasets
import numpy as np
import pytest

from elf.cli import ElfError
from elf.config import CorporaSettings
from elf.data.corpora import build_corpora
from elf.data.pack import (pack_conditional, pack_token_pairs, pack_token_streams,
                           pack_unconditional)
from elf.data.tokenizer import train_tokenizer
from elf.stages import prepare

EOS, PAD = 1, 0


def _check_dtypes(arrays):
    assert arrays["input_ids"].dtype == np.int32
    assert arrays["attention_mask"].dtype == np.int8
    assert arrays["cond_seq_mask"].dtype == np.int8
    assert arrays["source_length"].dtype == np.int32


# --------------------------------------------------------------------------------------------------
# Unconditional
# --------------------------------------------------------------------------------------------------

def test_documents_are_followed_by_eos_and_cut():
    docs = [[5, 6, 7], [8], [9, 10]]  # stream: 5 6 7 | 1 8 1 9 | 10 1
    out = pack_token_streams(docs, EOS, PAD, max_length=4)
    np.testing.assert_array_equal(out["input_ids"], [[5, 6, 7, 1], [8, 1, 9, 10]])  # tail dropped
    np.testing.assert_array_equal(out["attention_mask"], np.ones((2, 4)))
    np.testing.assert_array_equal(out["cond_seq_mask"], np.zeros((2, 4)))
    np.testing.assert_array_equal(out["source_length"], [0, 0])
    _check_dtypes(out)
    exact = pack_token_streams(docs, EOS, PAD, max_length=3)
    np.testing.assert_array_equal(exact["input_ids"], [[5, 6, 7], [1, 8, 1], [9, 10, 1]])


def test_corpus_shorter_than_one_sequence_is_padded_with_pad():
    out = pack_token_streams([[5, 6], [7]], EOS, PAD, max_length=7)
    np.testing.assert_array_equal(out["input_ids"], [[5, 6, 1, 7, 1, 0, 0]])
    np.testing.assert_array_equal(out["attention_mask"], [[1, 1, 1, 1, 1, 0, 0]])
    _check_dtypes(out)


def test_max_sequences_caps_rows():
    docs = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14]]
    out = pack_token_streams(docs, EOS, PAD, max_length=3, max_sequences=2)
    np.testing.assert_array_equal(out["input_ids"], [[5, 6, 7], [1, 8, 1]])


class WordTokenizer:
    """A stand-in tokenizer: one id per whitespace word; refuses added special tokens."""
    eos_token_id, pad_token_id = 1, 0

    def __init__(self):
        self.vocab = {}

    def __call__(self, texts, add_special_tokens=True):
        assert add_special_tokens is False
        return {"input_ids": [[self.vocab.setdefault(w, 10 + len(self.vocab)) for w in t.split()]
                              for t in texts]}


def test_pack_unconditional_tokenises_without_special_tokens():
    tok = WordTokenizer()
    out = pack_unconditional(["a b", "c", "a d e"], tok, max_length=4)
    # a=10 b=11 c=12 d=13 e=14: 10 11 1 12 | 1 10 13 14 | 1 (dropped)
    np.testing.assert_array_equal(out["input_ids"], [[10, 11, 1, 12], [1, 10, 13, 14]])


# --------------------------------------------------------------------------------------------------
# Conditional
# --------------------------------------------------------------------------------------------------

def test_pairs_source_truncated_target_eos_then_eos_padding():
    sources = [[11, 12, 13], [21]]
    targets = [[31, 32], [41, 42, 43, 44]]
    out = pack_token_pairs(sources, targets, EOS, max_length=6, max_input_length=2)
    np.testing.assert_array_equal(out["input_ids"], [[11, 12, 31, 32, 1, 1],
                                                     [21, 41, 42, 43, 44, 1]])
    np.testing.assert_array_equal(out["attention_mask"], [[1, 1, 1, 1, 1, 0],
                                                          [1, 1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(out["cond_seq_mask"], [[1, 1, 0, 0, 0, 0],
                                                         [1, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(out["source_length"], [2, 1])
    _check_dtypes(out)


def test_pairs_longer_than_max_length_are_truncated_without_eos():
    out = pack_token_pairs([[21, 22]], [[41, 42, 43, 44]], EOS, max_length=4, max_input_length=3)
    np.testing.assert_array_equal(out["input_ids"], [[21, 22, 41, 42]])
    np.testing.assert_array_equal(out["attention_mask"], [[1, 1, 1, 1]])
    np.testing.assert_array_equal(out["cond_seq_mask"], [[1, 1, 0, 0]])


def test_pack_conditional_with_tokenizer_and_mismatched_lengths():
    out = pack_conditional(["x y z"], ["p"], WordTokenizer(), max_length=5, max_input_length=2)
    np.testing.assert_array_equal(out["input_ids"], [[10, 11, 13, 1, 1]])
    np.testing.assert_array_equal(out["attention_mask"], [[1, 1, 1, 1, 0]])
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        pack_token_pairs([[1], [2]], [[3]], EOS, 4, 2)


# --------------------------------------------------------------------------------------------------
# The prepare stage
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepare")
    corpora = build_corpora(CorporaSettings(seed=0, train_docs=40, validation_docs=6, test_docs=6))
    texts = []
    for name, splits in corpora.items():
        splits.save_to_disk(str(root / "corpora" / name))
    texts += list(corpora["owt"]["train"]["text"]) + list(corpora["xsum"]["train"]["document"])
    texts += [p[lang] for p in corpora["wmt"]["train"]["translation"] for lang in ("de", "en")]
    train_tokenizer(texts, 300).save_pretrained(str(root / "tokenizer"))
    return root


def _prepare(inputs, out, **settings):
    parser = argparse.ArgumentParser()
    prepare.register(parser.add_subparsers())
    args = parser.parse_args(["prepare", "--settings", json.dumps(settings), "--tokenizer",
                              str(inputs / "tokenizer"), "--raw-root", str(inputs / "corpora"),
                              "--out", str(out)])
    args.func(args)
    return datasets.load_from_disk(str(out))


def test_prepare_unconditional(inputs, tmp_path):
    from elf.data.tokenizer import load_tokenizer
    data = _prepare(inputs, tmp_path / "owt", task="unconditional", source="embedded", name="owt",
                    max_length=32, max_train_sequences=5)
    assert list(data) == ["train", "validation", "test"]
    assert data["train"].num_rows == 5
    assert data["test"].column_names == ["input_ids", "attention_mask", "cond_seq_mask",
                                         "source_length", "text"]
    assert data["test"].features["input_ids"] == datasets.List(datasets.Value("int32"), length=32)
    tok = load_tokenizer(str(inputs / "tokenizer"))
    row = data["validation"][0]
    assert row["text"] == tok.decode(row["input_ids"], skip_special_tokens=True)
    raw = datasets.load_from_disk(str(inputs / "corpora" / "owt"))["validation"]["text"]
    first_doc = tok(raw[0], add_special_tokens=False)["input_ids"]
    stream = np.concatenate([r["input_ids"] for r in data["validation"]])
    assert list(stream[:len(first_doc) + 1]) == first_doc + [tok.eos_token_id]
    assert (inputs / "corpora").exists() and (tmp_path / "owt" / "provenance.json").is_file()


def test_prepare_conditional_is_reproducible(inputs, tmp_path):
    settings = dict(task="translation", source="embedded", name="wmt", subset="de-en",
                    max_length=48, max_input_length=24)
    first = _prepare(inputs, tmp_path / "a", **settings)
    _prepare(inputs, tmp_path / "b", **settings)
    raw = datasets.load_from_disk(str(inputs / "corpora" / "wmt"))["test"]
    assert first["test"]["source_text"] == [p["de"] for p in raw["translation"]]
    assert first["test"]["reference"] == [p["en"] for p in raw["translation"]]
    row = first["test"][0]
    n_source = row["source_length"]
    assert row["cond_seq_mask"] == [1] * n_source + [0] * (48 - n_source)
    assert row["input_ids"][sum(row["attention_mask"]) - 1] == 1   # target ends with EOS
    for split in ("train", "validation", "test"):
        arrow = f"{split}/data-00000-of-00001.arrow"
        assert filecmp.cmp(tmp_path / "a" / arrow, tmp_path / "b" / arrow, shallow=False)


def test_prepare_errors_are_clean(inputs, tmp_path):
    with pytest.raises(ElfError, match="max_input_length"):
        _prepare(inputs, tmp_path / "x", task="summarization", source="embedded", name="xsum",
                 max_length=64)
    with pytest.raises(ElfError, match="found columns: text"):
        _prepare(inputs, tmp_path / "x", task="translation", source="embedded", name="owt",
                 max_length=64, max_input_length=8)
    assert not (tmp_path / "x").exists()


def test_pack_token_pairs_pad_source_starts_every_target_at_max_input_length():
    out = pack_token_pairs([[5, 6], [7, 8, 9, 10]], [[3], [4, 4]], EOS, max_length=8,
                           max_input_length=3, source_pad_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 0, 3, EOS, EOS, EOS, EOS],
                                         [7, 8, 9, 4, 4, EOS, EOS, EOS]]
    assert out["attention_mask"].tolist() == [[1, 1, 0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]]
    assert out["cond_seq_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0, 0]] * 2
    assert out["source_length"].tolist() == [3, 3]


def test_config_refuses_pad_source_on_an_unconditional_dataset():
    from pathlib import Path

    import yaml

    from elf.config import ConfigError
    from elf.validate import parse_experiment

    cfg = yaml.safe_load((Path(__file__).resolve().parent.parent / "config" / "config.yaml").read_text())
    cfg["datasets"]["owt"]["pad_source"] = True
    with pytest.raises(ConfigError, match="only conditional datasets have a source"):
        parse_experiment(cfg)
