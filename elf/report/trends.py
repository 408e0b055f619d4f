"""The paper's claims checked on our numbers (config ``trends``), with a verdict that uses both spreads.

Each check compares one metric of two evaluated (run, sampler) pairs; the claim is that ``lower`` has
the lower value. With Δ = metric(lower) − metric(higher):

- the evaluation-seed SE of Δ is sqrt(se_lower² + se_higher²), each the SE over evaluation seeds of
  the pair's aggregate on the checked runs (their mean over training seeds: SE / sqrt(K));
- the training seeds are a run and its replicates (``replicate_of``). When both pairs are on the same
  run, Δ is taken per training seed (paired) and its training-seed SE is SD(Δ_k) / sqrt(K); across two
  runs, each side's SD over its own training seeds / sqrt(K) adds in quadrature (a side trained once
  adds nothing, and the row says the training spread is unmeasured there);
- margin = 2 × max(evaluation SE, training SE); Δ̄ is the mean over training seeds.
  **holds**: Δ̄ < −margin, and (paired) every training seed has Δ_k < 0;
  **does not hold**: Δ̄ > +margin, and (paired) every Δ_k > 0;
  **not resolved**: otherwise.
No I/O: ``check_trends`` takes the loaded aggregate rows (``elf.report.results.load_rows``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from elf import plan
from elf.config import Experiment, PairRef

HOLDS, FAILS, UNRESOLVED = "holds", "does not hold", "not resolved"
MARGIN_SES = 2.0


@dataclass(frozen=True)
class TrendResult:
    name: str
    claim: str
    metric: str
    lower: str
    higher: str
    delta: float          # Δ̄, mean over training seeds
    per_seed: tuple[float, ...]  # paired: Δ_k per training seed; unpaired: ()
    eval_se: float
    train_se: float       # nan when no side has replicates
    training_seeds: int
    verdict: str
    note: str


trend_runs = plan.training_seed_runs


def _values(frame: pd.DataFrame, exp: Experiment, ref: PairRef, metric: str):
    """(means, SEs) over the training seeds of ``ref``'s run, in ``trend_runs`` order."""
    means, ses = [], []
    for run in trend_runs(exp, ref.run):
        row = frame[(frame["run"] == run) & (frame["sampler"] == ref.sampler)]
        if row.empty or metric not in row.columns:
            return None
        means.append(float(row[metric].iloc[0]))
        se = row.get(f"{metric}_se")
        ses.append(float(se.iloc[0]) if se is not None and pd.notna(se.iloc[0]) else 0.0)
    return means, ses


def _sd(values: list[float]) -> float:
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def check_trend(name: str, trend, frame: pd.DataFrame, exp: Experiment) -> TrendResult:
    lower, higher = _values(frame, exp, trend.lower, trend.metric), _values(frame, exp, trend.higher,
                                                                             trend.metric)
    label = lambda ref: f"{ref.run}/{ref.sampler}"  # noqa: E731
    if lower is None or higher is None:
        return TrendResult(name, trend.claim, trend.metric, label(trend.lower), label(trend.higher),
                           math.nan, (), math.nan, math.nan, 0, UNRESOLVED, "no data")
    (l_means, l_ses), (h_means, h_ses) = lower, higher
    eval_se = math.sqrt((sum(s * s for s in l_ses) / len(l_ses) ** 2)
                        + (sum(s * s for s in h_ses) / len(h_ses) ** 2))
    paired = trend.lower.run == trend.higher.run
    if paired:
        per_seed = tuple(a - b for a, b in zip(l_means, h_means))
        k = len(per_seed)
        train_se = _sd(list(per_seed)) / math.sqrt(k) if k > 1 else math.nan
    else:
        per_seed = ()
        k = max(len(l_means), len(h_means))
        parts = [_sd(m) ** 2 / len(m) for m in (l_means, h_means) if len(m) > 1]
        train_se = math.sqrt(sum(parts)) if parts else math.nan
    delta = sum(l_means) / len(l_means) - sum(h_means) / len(h_means)
    known = [se for se in (eval_se, train_se) if math.isfinite(se)]
    margin = MARGIN_SES * max(known) if known else 0.0
    verdict = UNRESOLVED
    if delta < -margin and all(d < 0 for d in per_seed):
        verdict = HOLDS
    elif delta > margin and all(d > 0 for d in per_seed):
        verdict = FAILS
    note = _note(paired, l_means, h_means, trend)
    return TrendResult(name, trend.claim, trend.metric, label(trend.lower), label(trend.higher),
                       delta, per_seed, eval_se, train_se, k, verdict, note)


def _note(paired: bool, l_means, h_means, trend) -> str:
    if paired:
        return "" if len(l_means) > 1 else "one training seed: training spread not measured"
    once = [ref.run for ref, m in ((trend.lower, l_means), (trend.higher, h_means)) if len(m) == 1]
    return f"{', '.join(once)} trained once: its training spread not measured" if once else ""


def check_trends(frame: pd.DataFrame, exp: Experiment) -> list[TrendResult]:
    return [check_trend(name, trend, frame, exp) for name, trend in exp.trends.items()]


def trends_markdown(results: list[TrendResult]) -> str:
    """The verdict table (the review prints it; the README quotes it)."""
    if not results:
        return "No trend checks configured (`trends`).\n"
    resolved = sum(r.verdict != UNRESOLVED for r in results)
    lines = [f"{resolved} of {len(results)} checks resolve (margin: {MARGIN_SES:g} × the larger of the "
             "evaluation-seed and training-seed SEs of Δ = lower − higher).", "",
             "| Claim | Metric | Lower | Higher | Δ (mean over training seeds) | per training seed "
             "| eval SE | training SE | Verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        per_seed = ", ".join(f"{d:+.2f}" for d in r.per_seed) or "–"
        train = f"{r.train_se:.2f}" if math.isfinite(r.train_se) else "–"
        verdict = r.verdict + (f" ({r.note})" if r.note else "")
        lines.append(f"| {r.claim} | {r.metric} | {r.lower} | {r.higher} | {r.delta:+.2f} | {per_seed} "
                     f"| {r.eval_se:.2f} | {train} | **{verdict}** |")
    return "\n".join(lines) + "\n"


def seed_spread_markdown(frame: pd.DataFrame, exp: Experiment, metrics=("gen_ppl", "entropy")) -> str:
    """Per sampler of each replicated run: the value on every training seed, their mean and SD, beside
    the evaluation-seed SE of each (how much of the noise is training, how much sampling)."""
    blocks = []
    for run in exp.runs:
        runs = trend_runs(exp, run)
        if len(runs) < 2:
            continue
        lines = [f"Training seeds of `{run}`: {', '.join(f'{r} (seed {exp.run(r).budget.seed})' for r in runs)}.",
                 "", "| Sampler | Metric | per training seed (± eval SE) | mean | training SD |",
                 "|---|---|---|---|---|"]
        for sampler in plan.run_samplers(exp, runs[1]):   # those the replicates are evaluated on
            for metric in metrics:
                rows = [frame[(frame["run"] == r) & (frame["sampler"] == sampler)] for r in runs]
                if any(r.empty or metric not in r.columns for r in rows):
                    continue
                values = [float(r[metric].iloc[0]) for r in rows]
                ses = [r.get(f"{metric}_se") for r in rows]
                cells = ", ".join(f"{v:.2f} ± {float(se.iloc[0]):.2f}" if se is not None else f"{v:.2f}"
                                  for v, se in zip(values, ses))
                lines.append(f"| {sampler} | {metric} | {cells} | {sum(values) / len(values):.2f} "
                             f"| {_sd(values):.2f} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n" if blocks else ""
