"""Snakemake's own HTML report (``snakemake --report``) of a finished CI-sized DAG run: every figure and
table appears with its caption (workflow/report/<id>.rst), in the category of its paper section.

The DAG runs once per module (a few minutes on 2 cores). To reuse a finished run, point ELF_TEST_DAG
at a folder holding ``results/`` and ``reports/`` of a CI run (``snakemake --configfile config/ci.yaml
--config results=$ELF_TEST_DAG/results reports=$ELF_TEST_DAG/reports``): the fixture's snakemake call
then has nothing to do.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def snakemake(*args, timeout=1500):
    # --replace-workflow-config: the CI config alone, not merged into config/config.yaml (the
    # Snakefile's default configfile), whose figures would otherwise join the CI run.
    return subprocess.run(["snakemake", "--cores", "2", "--replace-workflow-config", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def finished_dag(tmp_path_factory):
    """A CI config whose results and reports are complete (run here unless ELF_TEST_DAG has them)."""
    reuse = os.environ.get("ELF_TEST_DAG")
    root = Path(reuse) if reuse else tmp_path_factory.mktemp("dag")
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["results"], cfg["reports"] = str(root / "results"), str(root / "reports")
    configfile = tmp_path_factory.mktemp("config") / "ci.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    proc = snakemake("--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return cfg, configfile


def rst_words(fid):
    """A run of plain words from a caption file (what survives rst → HTML unchanged)."""
    text = (ROOT / "workflow" / "report" / f"{fid}.rst").read_text()
    return max(re.findall(r"[A-Za-z][A-Za-z ,]{20,}", text), key=len).strip(" ,")


def test_html_report_has_every_figure_and_table_captioned_by_section(finished_dag, tmp_path):
    cfg, configfile = finished_dag
    html_path = tmp_path / "report.html"
    proc = snakemake("--configfile", str(configfile), "--report", str(html_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    html = html_path.read_text()
    for fid, fig in cfg["figures"].items():
        files = [f"{fid}.png"] if fig["kind"] == "figure" else [f"{fid}.md", f"{fid}.csv", f"{fid}.tex"]
        for name in files:
            assert f'"{name}"' in html, f"{name} is not in the report"
        assert rst_words(fid) in html, f"the caption of {fid} is not in the report"
        assert fig["section"] in html
    assert '"replication.html"' in html and "Replication review" in html
