"""The verdict's three properties on a CI-sized world (benchmarks/verdict.py builds it: a tiny
scorer and two tiny ELF runs, a full one and one with 5 % of its steps, each evaluated by
``elf evaluate``): a second evaluation of the same checkpoint on other seeds reads consistent with
the first turned into paper values, the short run's Gen. PPL reads inconsistent, and the paper's own
values fed in as ours read consistent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from elf.report.paper import load_paper_values

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("verdict_benchmark", ROOT / "benchmarks" / "verdict.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    world = bench.build_world(tmp_path_factory.mktemp("verdict-world"), steps=300, n=48)
    return {r["property"]: r for r in bench.rates(world, load_paper_values(ROOT / "config" /
                                                                          "paper_values.yaml"))}


def test_self_replication_reads_consistent(measured):
    r = measured["self-replication"]
    assert r["n"] == 2 * len(bench.SAMPLERS)              # Gen. PPL and entropy of every sampler
    assert r["rate"] >= 0.9
    assert set(r["comparisons"]["paper_se_basis"]) == {"assumed = ours"}   # T10 prints no SE
    assert (r["comparisons"]["ours_se"] > 0).all()        # every number of ours carries an SE


def test_a_run_with_a_fraction_of_the_steps_reads_inconsistent_on_gen_ppl(measured):
    r = measured["sensitivity (Gen. PPL)"]
    assert r["n"] == len(bench.SAMPLERS) and r["rate"] == 1.0


def test_the_papers_values_fed_in_as_ours_read_consistent(measured):
    r = measured["identity"]
    assert r["rate"] == 1.0
    sources = set(r["comparisons"]["src"])
    assert {"T1", "T9", "T10", "T4", "T5", "README"} <= sources and r["n"] >= 130


def test_the_table_prints_the_three_rates(measured):
    text = bench.table(list(measured.values()))
    assert "| self-replication | consistent |" in text and "| identity | consistent | 100% |" in text
