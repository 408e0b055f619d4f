"""config/paper_shapes.yaml (``elf shapes``, elf/stages/shapes.py): derived from config/paper.yaml and
equal to its derivation, the paper's runs, layouts, samplers and figures with only budgets, sampler
steps, data sources and model builds changed, and a DAG that plans one job of every kind the paper
config has."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from elf.cli import main as elf_main
from elf.stages import shapes
from elf.validate import parse_experiment

ROOT = Path(__file__).resolve().parent.parent
PAPER = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
SHAPES_TEXT = (ROOT / "config/paper_shapes.yaml").read_text()
SHAPES = yaml.safe_load(SHAPES_TEXT)


def test_the_committed_file_is_the_derivation_of_the_committed_paper_config():
    assert SHAPES_TEXT == shapes.render(PAPER), \
        "config/paper_shapes.yaml is stale: elf shapes --paper config/paper.yaml --out config/paper_shapes.yaml"
    parse_experiment(SHAPES)  # a valid config


def _without(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def test_it_keeps_the_papers_settings_and_changes_only_the_scale():
    assert sorted(SHAPES["runs"]) == sorted(shapes.KEPT_RUNS)
    kinds = {PAPER["runs"][r].get("kind", "train") for r in SHAPES["runs"]}
    assert kinds == {"train", "distill", "released"}
    for name, run in SHAPES["runs"].items():
        paper = PAPER["runs"][name]
        assert _without(run, "budget", "optim", "distill", "released", "released_revision") == \
            _without(paper, "budget", "optim", "distill", "released", "released_revision"), name
        assert run.get("budget", {}).get("steps", shapes.STEPS) == shapes.STEPS
    assert SHAPES["runs"]["R03"]["model"]["size"] == "ELF-L" and SHAPES["runs"]["R03"]["budget"]["batch_size"] == 1
    assert SHAPES["runs"]["R01_released"]["released"] == shapes.RELEASED_FOLDER
    for name, ds in SHAPES["datasets"].items():  # the paper's layouts: 1024; 64 + 64; 1024 + 64
        for key in ("task", "max_length", "max_input_length", "target_length"):
            assert ds.get(key) == PAPER["datasets"][name].get(key), (name, key)
        assert ds["source"] == "embedded"
    assert (SHAPES["datasets"]["owt"]["max_length"], SHAPES["datasets"]["xsum"]["max_length"]) == (1024, 1088)
    for name, sampler in SHAPES["samplers"].items():
        assert _without(sampler, "steps") == _without(PAPER["samplers"][name], "steps")
        assert sampler["steps"] == min(2, PAPER["samplers"][name]["steps"])
    for fid, spec in SHAPES["figures"].items():
        paper = PAPER["figures"][fid]
        assert _without(spec, "runs", "samplers") == _without(paper, "runs", "samplers")
        assert set(spec["runs"]) <= set(paper["runs"]) and spec["samplers"] == paper["samplers"][:2]
    assert {s["kind"] for s in SHAPES["figures"].values()} == {"figure", "table"}
    assert SHAPES["encoders"]["main"] | shapes.T5_SMALL == SHAPES["encoders"]["main"]
    assert SHAPES["encoders"]["scratch"]["d_model"] == PAPER["encoders"]["scratch"]["d_model"]
    assert SHAPES["scorer"]["source"] == "build" and SHAPES["scorer"]["width"] == 1280
    assert all(block.get("source") != "pretrained" for block in
               (SHAPES["tokenizer"], SHAPES["scorer"], *SHAPES["encoders"].values()))  # nothing downloaded


def test_it_plans_one_job_of_every_kind(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", "config/paper_shapes.yaml",
         "--config", f"results={tmp_path}/results", f"reports={tmp_path}/reports", "--",
         f"{tmp_path}/reports/all"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.MULTILINE))
    for rule in ("corpora", "tokenizer", "prepare", "encoder", "scorer", "embed", "embed_shard",
                 "embed_gather", "decoder", "train", "distill", "released", "evaluate", "trajectory",
                 "score_dataset", "figure", "table", "review", "manifest"):
        assert int(stats.get(rule, 0)) >= 1, rule
    assert int(stats["encoder"]) == 2 and int(stats["train"]) == 8  # main + scratch; R01-R05, R07, R12, R28
    assert int(stats["total"]) < 150


def test_the_command_writes_the_config_and_wants_one_thing(tmp_path, capsys):
    assert elf_main(["shapes", "--paper", str(ROOT / "config/paper.yaml"), "--out", str(tmp_path / "s.yaml")]) == 0
    assert (tmp_path / "s.yaml").read_text() == SHAPES_TEXT
    with pytest.raises(SystemExit):
        elf_main(["shapes"])
    assert "one of the arguments --paper --released is required" in capsys.readouterr().err


def test_the_released_folder_is_what_elf_release_accepts_for_r01_released(tmp_path, monkeypatch):
    from elf.config import DatasetSettings, EmbeddingSettings
    from elf.train.released import config_mismatches, read_checkpoint, read_config_yml

    monkeypatch.setattr(shapes, "T5_SMALL", {**shapes.T5_SMALL, "d_model": 16})  # a small width
    monkeypatch.setattr(shapes, "T5_VOCAB", 40)
    path = shapes.write_released(tmp_path / "ELF-B-owt-torch")
    assert path.name == "checkpoint_2" and path.parent.joinpath("config.yml").is_file()
    weights = read_checkpoint(path)
    assert weights.ema_from == "ema_params1" and weights.step == 2
    assert weights.ema["unembed_kernel"].shape[1] == 40
    exp = parse_experiment(SHAPES)
    run = exp.run("R01_released")
    problems = config_mismatches(read_config_yml(path.parent / "config.yml"), run,
                                 exp.datasets[run.dataset], exp.embeddings[run.embedding])
    assert problems == [] and isinstance(exp.datasets[run.dataset], DatasetSettings)
    assert isinstance(exp.embeddings[run.embedding], EmbeddingSettings)
