"""Pinned Hub revisions travel as ``hub:name@revision`` and reach every ``from_pretrained`` call (tokenizer,
encoder, scorer), and the config's revisions reach the rules' commands; no network (stand-ins)."""

from pathlib import Path

import pytest
import yaml

from elf.validate import parse_experiment
from elf.hub import hub_ref, pretrained_kwargs, pretrained_ref, snapshot_commit, split_ref

ROOT = Path(__file__).resolve().parents[1]


def test_refs_split_and_join(tmp_path):
    assert hub_ref("t5-small", "abc123") == "hub:t5-small@abc123" and hub_ref("t5-small", None) == "hub:t5-small"
    assert split_ref("hub:t5-small@abc123") == split_ref("t5-small@abc123") == ("t5-small", "abc123")
    assert split_ref("google-t5/t5-small") == ("google-t5/t5-small", None)
    odd = tmp_path / "me@work"   # an existing local path is never split
    odd.mkdir()
    assert split_ref(str(odd)) == (str(odd), None)
    assert pretrained_kwargs("hub:gpt2-large@refs/pr/1") == ("gpt2-large", {"revision": "refs/pr/1"})
    assert pretrained_kwargs(str(odd)) == (str(odd), {})
    assert pretrained_ref(str(odd), None) == str(odd) and pretrained_ref("t5-small", "r") == "hub:t5-small@r"
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert snapshot_commit(f"/hf/hub/models--x--y/snapshots/{commit}/checkpoint_5") == commit
    assert snapshot_commit("/data/checkpoint_5") is None


def recording_stub(calls: list):
    """A stand-in for a transformers class: records each from_pretrained call, downloads nothing."""
    class Stub:
        @staticmethod
        def from_pretrained(name, **kwargs):
            calls.append((name, kwargs))
            raise OSError("stand-in: no download")
    return Stub


@pytest.mark.parametrize("load, module, attr", [
    ("elf.data.tokenizer:load_tokenizer", "elf.data.tokenizer", "AutoTokenizer"),
    ("elf.embed.encoder:load_encoder", "elf.embed.encoder", "T5EncoderModel"),
])
def test_pinned_revision_reaches_from_pretrained(load, module, attr, monkeypatch):
    import importlib

    calls = []
    monkeypatch.setattr(importlib.import_module(module), attr, recording_stub(calls))
    mod, fn = load.split(":")
    with pytest.raises(OSError, match="stand-in"):
        getattr(importlib.import_module(mod), fn)("hub:t5-small@abc123")
    assert calls[0][0] == "t5-small" and calls[0][1]["revision"] == "abc123"


@pytest.mark.parametrize("load, module, attr", [
    ("elf.data.tokenizer:load_tokenizer", "elf.data.tokenizer", "AutoTokenizer"),
    ("elf.embed.encoder:load_encoder", "elf.embed.encoder", "T5EncoderModel"),
    ("elf.evaluate.scorer:load_scorer", "elf.evaluate.scorer", "AutoTokenizer"),
])
@pytest.mark.parametrize("ref", ["results/models/tokenizr", "t5-small", "owner/name@abc"])
def test_a_missing_local_path_never_reaches_the_hub(load, module, attr, ref, monkeypatch):
    """Without ``hub:`` (which only the workflow's source: pretrained adds) a reference is a local
    path: a missing one is refused before any from_pretrained call."""
    import importlib

    from elf.cli import ElfError

    calls = []
    monkeypatch.setattr(importlib.import_module(module), attr, recording_stub(calls))
    mod, fn = load.split(":")
    with pytest.raises(ElfError, match="no such local file or folder"):
        getattr(importlib.import_module(mod), fn)(ref)
    assert calls == []


def test_scorer_loads_at_its_revision(monkeypatch):
    from elf.evaluate import scorer

    calls = []
    monkeypatch.setattr(scorer, "AutoTokenizer", recording_stub(calls))
    with pytest.raises(OSError):
        scorer.load_scorer("hub:gpt2-large@r1")
    assert calls == [("gpt2-large", {"revision": "r1"})]


def test_every_hub_id_of_the_paper_config_has_a_revision_field():
    exp = parse_experiment(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    raw = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    assert "revision" in raw["tokenizer"] and "revision" in raw["scorer"]
    assert all("revision" in e for e in raw["encoders"].values() if e["source"] == "pretrained")
    for name, ds in exp.datasets.items():
        assert "revision" in raw["datasets"][name], name
        if ds.test is not None:
            assert ds.test.revision, name      # the commits the authors' sets were built from
    for name in ("R01_released", "R02_released", "R03_released", "R04_released", "R05_released",
                 "R34_released"):
        assert "released_revision" in raw["runs"][name], name
