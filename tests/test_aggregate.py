"""Seed aggregation (spec §6): mean and SE (ddof = 1) across seeds against hand-computed values."""

from __future__ import annotations

import math

import pytest

from elf.cli import main
from elf.evaluate.aggregate import ONE_SEED_NOTE, aggregate_metrics, aggregate_values
from elf.io import write_json
from elf.artifacts import file_sha256, read_json


def test_mean_and_se_across_seeds_by_hand():
    # values 20, 22, 24, 26, 28, 30: mean 25, sample variance 14, se sqrt(14/6)
    per_seed = {str(seed): 20.0 + 2 * seed for seed in range(6)}
    entry = aggregate_values(per_seed)
    assert entry["mean"] == pytest.approx(25.0)
    assert entry["se"] == pytest.approx(math.sqrt(14 / 6))
    assert entry["n"] == 6 and entry["per_seed"] == per_seed
    assert "se_note" not in entry


def test_one_seed_has_zero_se_and_a_note():
    entry = aggregate_values({"0": 31.5})
    assert entry == {"mean": 31.5, "se": 0.0, "n": 1, "per_seed": {"0": 31.5}, "se_note": ONE_SEED_NOTE}


def test_missing_value_gives_no_mean():
    entry = aggregate_values({"0": 3.0, "1": None})
    assert entry["mean"] is None and entry["se"] is None and entry["n"] == 2


def test_rouge_example_se_is_kept():
    one = aggregate_metrics({"0": {"rouge1": 30.0, "rouge1_se": 0.5, "rouge2": 9.0, "rouge2_se": 0.3,
                                   "rougeL": 24.0, "rougeL_se": 0.4, "n_examples": 100}})
    assert set(one) == {"rouge1", "rouge2", "rougeL", "rouge1_se", "rouge2_se", "rougeL_se", "n_examples"}
    assert one["rouge2_se"]["mean"] == 0.3 and one["rouge2_se"]["se"] == 0.0
    assert one["rouge1"]["se_examples"] == 0.5 and one["rougeL"]["se_examples"] == 0.4
    two = aggregate_metrics({"0": {"rouge1": 30.0, "rouge1_se": 0.5},
                             "1": {"rouge1": 32.0, "rouge1_se": 0.7}})
    assert two["rouge1"]["mean"] == pytest.approx(31.0) and two["rouge1"]["se"] == pytest.approx(1.0)
    assert two["rouge1"]["se_examples_per_seed"] == {"0": 0.5, "1": 0.7}
    assert two["rouge1_se"]["mean"] == pytest.approx(0.6)


def test_seeds_must_report_the_same_metrics():
    with pytest.raises(ValueError, match="seed 1"):
        aggregate_metrics({"0": {"gen_ppl": 1.0, "entropy": 5.0}, "1": {"gen_ppl": 1.0}})


def write_score(path, seed, gen_ppl, entropy, run="owt-b"):
    write_json(path, {"provenance": {}, "samples_provenance": {"seed": seed, "run": run, "sampler": "ode64"},
                      "metrics": {"gen_ppl": gen_ppl, "entropy": entropy, "n_samples": 10,
                                  "n_empty": 0, "n_scored_tokens": 900}})


def test_aggregate_stage(tmp_path, capsys):
    values = {0: (30.0, 5.1), 1: (34.0, 5.3), 2: (32.0, 5.2)}
    paths = [tmp_path / f"seed{s}.json" for s in values]
    for path, (seed, (ppl, ent)) in zip(paths, values.items()):
        write_score(path, seed, ppl, ent)
    out = tmp_path / "agg.json"
    argv = ["aggregate", "--scores", *map(str, paths), "--run", "owt-b", "--sampler", "ode64",
            "--out", str(out)]
    assert main(argv) == 0
    result = read_json(out)
    assert result["run"] == "owt-b" and result["sampler"] == "ode64"
    assert result["metrics"]["gen_ppl"]["mean"] == pytest.approx(32.0)
    assert result["metrics"]["gen_ppl"]["se"] == pytest.approx(math.sqrt(4.0 / 3))  # var 4, n 3
    assert result["metrics"]["entropy"]["se"] == pytest.approx(math.sqrt(0.01 / 3))
    assert result["metrics"]["gen_ppl"]["per_seed"] == {"0": 30.0, "1": 34.0, "2": 32.0}
    assert result["provenance"]["scores"] == [{"path": str(p), "sha256": file_sha256(p)} for p in paths]
    # a score file of another run is refused, and nothing is written
    write_score(paths[0], 0, 30.0, 5.1, run="other")
    out.unlink()
    assert main(argv) == 2 and not out.exists()
    assert "other" in capsys.readouterr().err
