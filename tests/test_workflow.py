"""The DAG end to end on the CI-sized config, incremental rebuilds, granular reruns and the linter."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def snakemake(*args, timeout=1500):
    return subprocess.run(["snakemake", "--cores", "2", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dag")
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["results"], cfg["reports"] = str(tmp / "results"), str(tmp / "reports")
    configfile = tmp / "ci.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    proc = snakemake("--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, configfile


def planned_rules(configfile, *extra):
    proc = snakemake("-n", "--configfile", str(configfile), *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout.split("Job stats:")[-1] if "Job stats:" in proc.stdout else ""
    rules = set()
    for line in table.splitlines()[3:]:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            rules.add(parts[0])
    return rules


def test_reports_all_lists_every_figure_and_table(ci_run):
    tmp, _ = ci_run
    manifest = (tmp / "reports" / "all").read_text()
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    assert len(cfg["figures"]) >= 6
    for fid, fig in cfg["figures"].items():
        assert f"## {fid}" in manifest
        folder, suffixes = ("figures", ("png", "csv")) if fig["kind"] == "figure" \
            else ("tables", ("md", "csv", "tex"))
        for suffix in suffixes:
            path = tmp / "reports" / folder / f"{fid}.{suffix}"
            assert path.stat().st_size > 0 and str(path) in manifest
    assert (tmp / "reports" / "replication.md").read_text().count("NOT A REPLICATION") >= 1


def test_deleting_an_intermediate_rebuilds_only_it_and_dependents(ci_run):
    tmp, configfile = ci_run
    (tmp / "results" / "scores" / "base" / "sde8" / "seed1.json").unlink()
    planned = planned_rules(configfile)
    assert planned == {"score", "aggregate", "table", "review", "manifest", "all"}, planned
    proc = snakemake("--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert planned_rules(configfile) == set()


@pytest.mark.parametrize("module, expected", [
    ("elf/report/figures.py", {"figure", "table", "review", "manifest", "all"}),
    ("elf/flow/samplers.py", {"sample", "score", "aggregate", "figure", "table", "review", "manifest",
                              "all"}),
])
def test_editing_code_reruns_only_the_rules_that_run_it(ci_run, module, expected):
    _, configfile = ci_run
    path = ROOT / module
    stat = path.stat()
    try:
        os.utime(path, (stat.st_atime, stat.st_mtime + 3600))
        assert planned_rules(configfile) == expected
    finally:
        os.utime(path, (stat.st_atime, stat.st_mtime))


def test_snakemake_lint_passes():
    proc = snakemake("--lint", "--configfile", "config/ci.yaml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
