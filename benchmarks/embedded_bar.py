"""Did the embedded default's main run learn the corpus's language? One table from a finished DAG.

Reads the aggregates of one (run, sampler) — by default the main run at the paper's 32-step system
setting (SDE γ 1.5, SC-CFG 3) — on the run and each of its training-seed replicates (mean ± SE over
the evaluation seeds), and the Dataset and calibration lines (``results/scores/_dataset/<dataset>.json``),
then states the bar: Gen. PPL ≤ ``--max-gen-ppl``, entropy ≥ the Dataset line's − ``--max-entropy-drop``,
repetition ≤ ``--max-repetition``, and Gen. PPL against twice the Dataset line's (the goal).

    snakemake --cores all && python benchmarks/embedded_bar.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from elf import plan
from elf.config import parse_experiment
from elf.io import read_json

METRICS = ("gen_ppl", "entropy", "repetition")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--run", default="base")
    p.add_argument("--sampler", default="sde32")
    p.add_argument("--max-gen-ppl", type=float, default=150.0)
    p.add_argument("--max-entropy-drop", type=float, default=0.3)
    p.add_argument("--max-repetition", type=float, default=0.2)
    args = p.parse_args()
    exp = parse_experiment(yaml.safe_load(Path(args.config).read_text()))
    evals = Path(exp.results) / "evals"
    rows = []
    for run in plan.training_seed_runs(exp, args.run):
        metrics = read_json(plan.aggregate_path(evals, exp, run, args.sampler))["metrics"]
        rows.append((f"{run} (training seed {exp.run(run).budget.seed})", metrics))
    dataset = read_json(Path(exp.results) / "scores" / "_dataset" / f"{exp.run(args.run).dataset}.json")
    print(f"{args.sampler} on {args.run}: mean ± SE over evaluation seeds\n")
    print(f"| {'':34} | Gen. PPL        | entropy        | repetition     |")
    print("|---|---|---|---|")
    for name, m in rows:
        cells = [f"{m[k]['mean']:7.2f} ± {m[k]['se']:5.2f}" if k in m else "–" for k in METRICS]
        print(f"| {name:34} | " + " | ".join(cells) + " |")
    means = {k: sum(m[k]["mean"] for _, m in rows) / len(rows) for k in METRICS if all(k in m for _, m in rows)}
    print(f"| {'mean over training seeds':34} | " + " | ".join(f"{means.get(k, float('nan')):15.2f}"
                                                             for k in METRICS) + " |")
    lines = {"Dataset (held-out rows, cut as samples)": dataset["metrics"],
             **{f"{how} text (calibration)": v for how, v in dataset.get("calibration", {}).items()}}
    for name, m in lines.items():
        print(f"| {name:34} | " + " | ".join(f"{m.get(k) or float('nan'):15.2f}" for k in METRICS) + " |")
    ref = dataset["metrics"]
    checks = [("Gen. PPL ≤ %g" % args.max_gen_ppl, means["gen_ppl"] <= args.max_gen_ppl),
              (f"entropy ≥ Dataset − {args.max_entropy_drop:g} ({ref['entropy'] - args.max_entropy_drop:.2f})",
               means["entropy"] >= ref["entropy"] - args.max_entropy_drop),
              (f"repetition ≤ {args.max_repetition:g}", means["repetition"] <= args.max_repetition),
              (f"goal: Gen. PPL ≤ 2 × Dataset ({2 * ref['gen_ppl']:.1f})", means["gen_ppl"] <= 2 * ref["gen_ppl"])]
    print()
    for text, ok in checks:
        print(f"- {text}: {'met' if ok else 'NOT met'}")
    return 0 if all(ok for _, ok in checks[:3]) else 1


if __name__ == "__main__":
    sys.exit(main())
