"""Benchmark: how planning time grows with the number of runs (issue 26: it must stay linear).

Builds ``config/ci.yaml`` grown to N runs (ablations of ``base``, every fifth a training-seed
replicate of the one before), one sampler and one figure per ten runs, writes it to a temporary
folder and times, for each N:
- ``plan``: ``elf.validate.validate_workflow_config`` + ``elf.plan.Dag`` + every input function and
  setting the rules call (what the Snakefile does in Python, without Snakemake);
- ``parse``: ``snakemake --list-rules``: Snakemake reading the Snakefile (the same validation and
  plan, every rule defined) without building the DAG;
- ``snakemake -n``: the real dry run (the Snakefile parsed, the whole DAG built: about two jobs a
  run, where Snakemake's own cost per job dominates), unless ``--no-snakemake`` or N is above
  ``--snakemake-max``.

Nothing is written outside the temporary folder.

Measured on the 2-core development machine, idle, 2026-12-02 (a fresh instance): plan 0.01 /
0.02 / 0.20 / 2.6 s, Snakefile parse 1.5 / 1.5 / 1.9 / 5.9 s, ``snakemake -n`` 1.9 / 2.2 / 5.5 /
40.4 s at 10 / 100 / 1,000 / 10,000 runs; three more dry runs of 10,000 runs took 38.2-38.6 s.
An earlier instance of the same machine took 49.8-64.4 s (median 59 s over eight) on the same
planning code.
The dry run of 10,000 runs (about 21,000 jobs) is Snakemake's own work
per job, ~1.9-2.8 ms each. On 2026-12-01 it took 192 s: each job then listed its ~45 source files (now
one code digest per stage), and the training rule's constraint spelled all 10,000 runs, a regex
Snakemake rewrote into every job's patterns. Before issue 26, 100 runs took 21 s to plan and 1,000
did not finish in 150 s.

    python benchmarks/plan_scale.py                          # 10 100 1000 10000
    python benchmarks/plan_scale.py --runs 10 100 --snakemake-max 100
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS_PER_FIGURE = 10


def grown_config(n_runs: int, results: Path, reports: Path) -> dict:
    """The CI config with ``n_runs`` runs in all, one sampler and one figure per ten added runs."""
    cfg = copy.deepcopy(yaml.safe_load((ROOT / "config" / "ci.yaml").read_text()))
    cfg["results"], cfg["reports"] = str(results), str(reports)
    added, parent = [], None
    for i in range(max(0, n_runs - len(cfg["runs"]))):
        name = f"s{i:05d}"
        if i % 5 == 4 and parent is not None:   # a replicate of the previous ablation
            cfg["runs"][name] = {"replicate_of": parent, "budget": {"seed": 100_000 + i}}
            continue
        cfg["runs"][name] = {"budget": {"seed": 1_000 + i}}
        added.append(name)
        parent = name
    for k in range(0, len(added), RUNS_PER_FIGURE):
        sampler = f"ode_s{k // RUNS_PER_FIGURE}"
        cfg["samplers"][sampler] = {"method": "ode", "steps": 4, "sc_cfg": 1.0 + (k % 3) * 0.5}
        cfg["figures"][f"S{k // RUNS_PER_FIGURE}"] = {
            "kind": "figure", "title": "scale", "runs": added[k:k + RUNS_PER_FIGURE],
            "samplers": [sampler], "section": "Scale"}
    cfg["evaluation"]["replicate_samplers"] = [*cfg["evaluation"]["replicate_samplers"],
                                               *(s for s in cfg["samplers"] if s.startswith("ode_s"))]
    return cfg


def time_plan(path: Path) -> float:
    """Seconds to validate the config and call every plan function the rules call."""
    from elf import plan
    from elf.report.registry import needs
    from elf.validate import validate_workflow_config

    start = time.perf_counter()
    config = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    exp = validate_workflow_config(config, [path])
    dag = plan.Dag(exp, needs)
    for run in exp.runs:
        kind = exp.run(run).kind
        if kind == "train":
            dag.train_settings_json(run)
            dag.train_priority(type("W", (), {"run": run}))
        for group in plan.eval_groups(exp, run):
            dag.eval_plan_json(run, group)
    for fid in exp.figures:
        dag.evals_for(fid), dag.run_metadata_for(fid), dag.figure_files(fid)
        dag.figure_settings_json(config, fid)
    dag.review_inputs()
    return time.perf_counter() - start


def time_snakemake(path: Path, timeout: float, *args: str) -> str:
    start = time.perf_counter()
    try:
        proc = subprocess.run(["snakemake", *args, "--configfile", str(path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"> {timeout:.0f} s (timed out)"
    seconds = time.perf_counter() - start
    if proc.returncode:
        return f"failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or [''])[-1][:120]}"
    return f"{seconds:.1f} s"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, nargs="+", default=[10, 100, 1_000, 10_000])
    p.add_argument("--no-snakemake", action="store_true", help="time the plan only")
    p.add_argument("--snakemake-max", type=int, default=10_000, help="largest N given to snakemake -n")
    p.add_argument("--timeout", type=float, default=600, help="seconds per snakemake -n")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    print(f"{'runs':>7} {'figures':>8} {'samplers':>9} {'plan':>9} {'parse':>9}  snakemake -n")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.runs:
            cfg = grown_config(n, Path(tmp) / "results", Path(tmp) / "reports")
            path = Path(tmp) / f"scale{n}.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            planned = time_plan(path)
            skip = args.no_snakemake or n > args.snakemake_max
            parse = "-" if args.no_snakemake else time_snakemake(path, args.timeout, "--list-rules")
            real = "-" if skip else time_snakemake(path, args.timeout, "-n")  # as a user types it
            print(f"{len(cfg['runs']):>7} {len(cfg['figures']):>8} {len(cfg['samplers']):>9} "
                  f"{planned:>7.2f} s {parse:>9}  {real}", flush=True)


if __name__ == "__main__":
    main()
