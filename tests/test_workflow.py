"""The DAG end to end on the CI-sized config, incremental rebuilds, granular reruns and the linter."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from elf import deps

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def snakemake(*args, timeout=1500):
    return subprocess.run(["snakemake", "--cores", "2", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """The CI config run end to end (a few minutes). ELF_TEST_DAG=<folder> reuses a finished run."""
    reuse = os.environ.get("ELF_TEST_DAG")
    tmp = Path(reuse) if reuse else tmp_path_factory.mktemp("dag")
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["results"], cfg["reports"] = str(tmp / "results"), str(tmp / "reports")
    configfile = tmp / "ci.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    proc = snakemake("--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, configfile


def planned_rules(configfile, *extra):
    # targets before --configfile, which takes any number of values
    proc = snakemake("-n", *extra, "--configfile", str(configfile))
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
    """Snakemake 9 does not regenerate a missing intermediate while the results that need it are up to
    date; asked for, it rebuilds only that folder (the same bytes: sampling is seeded). A rebuilt folder
    is newer than what reads it, so the next run redoes the figures and tables that use it, the review
    and the manifest, and nothing upstream (no training, distillation or embedding)."""
    tmp, configfile = ci_run
    evals = tmp / "results" / "evals" / "base" / "all"
    samples = evals / "samples" / "sde8" / "seed1.jsonl"
    before = samples.read_bytes()
    shutil.rmtree(evals)
    assert planned_rules(configfile) == set()
    assert planned_rules(configfile, str(evals)) == {"evaluate"}
    proc = snakemake(str(evals), "--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert samples.read_bytes() == before
    planned = planned_rules(configfile)
    assert {"figure", "manifest"} <= planned
    assert planned <= {"figure", "table", "review", "manifest", "all"}
    proc = snakemake("--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert planned_rules(configfile) == set()


def dry_run_jobs(configfile, *extra) -> list[dict]:
    """Each job ``snakemake -n`` plans: its rule, wildcards, input and output files."""
    proc = snakemake("-n", *extra, "--configfile", str(configfile))
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = []
    for line in proc.stdout.splitlines():
        if re.match(r"(local)?rule \w+:", line):
            jobs.append({"rule": line.split()[-1].rstrip(":"), "wildcards": "", "input": [], "output": [],
                         "stage": None})
        elif jobs and (m := re.match(r"\s+(wildcards|input|output): (.*)", line)):
            key, value = m.groups()
            jobs[-1][key] = value.strip() if key == "wildcards" else value.split(", ")
            if key == "wildcards" and jobs[-1]["rule"] == "code_digest":  # hashes the stage it names
                jobs[-1]["stage"] = value.strip().removeprefix("stage=")
        elif jobs and line.startswith("Shell command:"):  # the profile prints each job's command
            found = re.search(r"(?:^|\s)(?:elf|-m elf) ([a-z]+) ", line.split(":", 1)[1] + " ")
            if found:  # ("Shell command: None" for a run: block such as code_digest's)
                jobs[-1]["stage"] = found.group(1)
    return jobs


def planned_jobs(configfile) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job ``snakemake -n`` plans."""
    return {(job["rule"], job["wildcards"]) for job in dry_run_jobs(configfile)}


def jobs_running(jobs: list[dict], module: str) -> set[tuple[str, str]]:
    """The jobs whose stage imports ``module`` (elf/deps.py), and every job that reads what one of
    them writes."""
    key = {id(job): (job["rule"], job["wildcards"]) for job in jobs}
    writer = {out: key[id(job)] for job in jobs for out in job["output"]}
    stale = {key[id(job)] for job in jobs if job["stage"] and module in deps.stage_modules(job["stage"])}
    while more := {key[id(job)] for job in jobs if key[id(job)] not in stale
                   and any(writer.get(name) in stale for name in job["input"])}:
        stale |= more
    return stale


@pytest.fixture(scope="module")
def every_job(ci_run):
    """Every job of the CI DAG with its files and stage (``--forceall -n``): what an edit may rerun."""
    jobs = dry_run_jobs(ci_run[1], "--forceall", "--printshellcmds")
    assert sum(job["stage"] is not None for job in jobs) >= 30
    return jobs


def test_every_rule_output_is_a_plan_pattern(ci_run, every_job):
    """Each job's outputs are the plan's output patterns (elf.plan.Dag: composed from
    elf.artifacts.layout) filled with its wildcards, and no rule spells an output path itself."""
    from elf.plan import Dag
    from elf.validate import parse_experiment

    dag = Dag(parse_experiment(yaml.safe_load(ci_run[1].read_text())))
    patterns = dag.output_patterns()
    unmatched = []
    for job in every_job:
        wildcards = dict(item.split("=", 1) for item in job["wildcards"].split(", ") if "=" in item)
        filled = set()
        for pattern in patterns:
            try:
                filled.add(pattern.format(**wildcards))
            except KeyError:  # a pattern over other wildcards
                continue
        unmatched += [f"{job['rule']} ({job['wildcards']}): {out}" for out in job["output"] if out not in filled]
    assert not unmatched, "outputs that are no plan pattern:\n" + "\n".join(unmatched)
    assert {job["rule"] for job in every_job} >= {"train", "distill", "evaluate", "embed", "figure", "table"}
    spelled = []
    for path in sorted((ROOT / "workflow").rglob("*.smk")):
        for block in re.findall(r"\n    output:\n((?:        .*\n|\n)+)", path.read_text()):
            spelled += [f"{path.name}: {line.strip()}" for line in block.splitlines() if 'f"{' in line]
    assert not spelled, "rule outputs spelled in the workflow instead of the plan: " + "; ".join(spelled)


ELF_MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "elf").rglob("*.py"))


@pytest.mark.parametrize("module", ELF_MODULES)
def test_editing_any_module_plans_exactly_the_jobs_whose_stage_imports_it(ci_run, every_job, module):
    """A comment appended to one module of elf/ (a real edit: Snakemake 9 ignores a newer mtime when a
    small file's checksum is unchanged) plans the jobs whose stage imports it (elf/deps.py, declared by
    code(stage)) and everything downstream of them; a module no stage imports plans nothing."""
    _, configfile = ci_run
    path = ROOT / module
    expected = jobs_running(every_job, deps.module_name(path))
    text, stat = path.read_text(), path.stat()
    try:
        path.write_text(text + "\n# edited by test_workflow\n")
        assert planned_jobs(configfile) == expected
    finally:
        path.write_text(text)
        os.utime(path, (stat.st_atime, stat.st_mtime))


def test_editing_one_runs_setting_plans_only_that_runs_jobs_and_figures(ci_run, tmp_path):
    """Each figure's job gets its own slice of the config (elf.plan.figure_config): a changed run
    retrains, re-evaluates and re-renders what shows it, and the review and manifest, nothing else."""
    _, configfile = ci_run
    cfg = yaml.safe_load(configfile.read_text())
    cfg["runs"]["wmt"]["objective"]["label_drop_prob"] = 0.2
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(edited)
    assert {rule for rule, _ in jobs} == {"experiment", "train", "evaluate", "table", "review",
                                          "manifest", "all"}
    assert {w for rule, w in jobs if rule in ("figure", "table")} == {"fid=T1"}
    assert {w for rule, w in jobs if rule in ("train", "evaluate")} == {"run=wmt", "run=wmt, group=all"}


def test_snakemake_lint_passes():
    proc = snakemake("--lint", "--configfile", "config/ci.yaml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_rules_are_snakefmt_formatted():
    proc = subprocess.run(["snakefmt", "--check", "workflow"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def _caption_words(fid):
    """A run of plain words from a caption file (what survives rst → HTML unchanged)."""
    text = (ROOT / "workflow" / "report" / f"{fid}.rst").read_text()
    return max(re.findall(r"[A-Za-z][A-Za-z ,]{20,}", text), key=len).strip(" ,")


def test_html_report_has_every_figure_and_table_captioned_by_section(ci_run, tmp_path):
    """Snakemake's own HTML report: each figure and table with its caption (workflow/report/<id>.rst),
    in the category of its paper section."""
    _, configfile = ci_run
    cfg = yaml.safe_load(configfile.read_text())
    html_path = tmp_path / "report.html"
    proc = snakemake("--configfile", str(configfile), "--report", str(html_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    html = html_path.read_text()
    for fid, fig in cfg["figures"].items():
        files = [f"{fid}.png"] if fig["kind"] == "figure" else [f"{fid}.md", f"{fid}.csv", f"{fid}.tex"]
        for name in files:
            assert f'"{name}"' in html, f"{name} is not in the report"
        if (ROOT / "workflow" / "report" / f"{fid}.rst").exists():
            assert _caption_words(fid) in html, f"the caption of {fid} is not in the report"
        assert fig["section"] in html
    assert '"replication.html"' in html and "Replication review" in html


def test_audit_traces_a_figure_of_the_dag(ci_run):
    tmp, _ = ci_run
    proc = subprocess.run(["elf", "audit", str(tmp / "reports" / "figures" / "F4.png")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for link in ("aggregate", "scores", "samples", "checkpoint", "run config", "embedding store",
                 "dataset"):
        assert link in proc.stdout
