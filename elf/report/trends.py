"""The paper's claims checked on our numbers (config ``trends``), with a verdict that uses both spreads.

Each check compares one metric of two evaluated (run, sampler) pairs; the claim is that ``lower`` has
the lower value. With Δ = metric(lower) − metric(higher):

- each side's evaluation SE on one training seed is the conservative SE of the review
  (``elf.report.results.verdict_se``: the larger of the SE over evaluation seeds and the SE from the
  samples' own spread, so it exists from one seed); the evaluation SE of Δ is
  sqrt(se_lower² + se_higher²) over the checked runs (their mean over training seeds: SE / sqrt(K));
- the training seeds are a run and its replicates (``replicate_of``). When both pairs are on the same
  run, Δ is taken per training seed (paired) and its training-seed SE is SD(Δ_k) / sqrt(K); across two
  runs, each side's SD over its own training seeds / sqrt(K) adds in quadrature (a side trained once
  adds nothing, and the row says the training spread is unmeasured there);
- margin = 2 × max(evaluation SE, training SE); Δ̄ is the mean over training seeds.
  **holds**: Δ̄ < −margin, and (paired) every training seed has Δ_k < 0;
  **does not hold**: Δ̄ > +margin, and (paired) every Δ_k > 0;
  **not resolved (spread too wide)**: before any of these, when a side's evaluation SE on some
  training seed exceeds ``NOISY_FRACTION`` (the review's, elf/report/verdict.py) of its value — e.g.
  4-step samplers at 88 ± 30 Gen. PPL: a margin that narrow a difference would cross with float noise;
  a fixed, wide threshold on a ratio gives the same verdict on every machine;
  **not resolved**: otherwise.
A claim of ``relation: equal`` (shared ≈ separate decoder) holds when |Δ̄| + margin ≤
``EQUAL_FRACTION`` × the mean of the two sides, does not hold when |Δ̄| − margin exceeds it, and is not
resolved otherwise.
A side trained once says "training spread unmeasured" and what ``REPLICATES`` more training seeds of
its run would cost (``replicate_gpu_hours``).
No I/O: ``check_trends`` takes the loaded aggregate rows (``elf.report.results.load_rows``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pandas as pd

from elf import pairs
from elf.config import Experiment, PairRef
from elf.report.results import verdict_se
from elf.report.verdict import NOISY_FRACTION

HOLDS, FAILS, UNRESOLVED = "holds", "does not hold", "not resolved"
TOO_WIDE = "spread too wide"
MARGIN_SES = 2.0
EQUAL_FRACTION = 0.10   # relation "equal": the two sides within a tenth of their mean
REPLICATES = 2          # the training seeds a claim's spread needs beyond the first
# Throughput assumed for the cost of replicates: the authors' README, "~4 h per OpenWebText epoch for
# ELF-B on 8x H200, global batch 512" = 19,000 steps x 512 rows x 1,024 slots in 32 GPU-hours; other
# sizes in proportion to their parameters.
SLOTS_PER_GPU_HOUR_B = 19_000 * 512 * 1024 / 32.0

TREND_RULE = (
    f"Trend rule. Each claim compares one metric of two (run, sampler) pairs, Δ = lower − higher, with "
    f"the conservative SEs of the verdict rule above. A claim is **not resolved (spread too wide)** when "
    f"a side's evaluation SE on some training seed exceeds {NOISY_FRACTION:g} × its value (the same "
    f"noise limit as the comparisons). Otherwise it **holds** when Δ (the mean over training seeds) is "
    f"below −{MARGIN_SES:g} × the larger of its evaluation-seed SE and its training-seed SE (the run "
    f"and its `replicate_of` replicates) and every training seed agrees in sign; it **does not hold** "
    f"when the same is true with the signs reversed; otherwise it is **not resolved** at this scale. "
    f"An 'equal' claim holds when |Δ| + margin ≤ {EQUAL_FRACTION:g} × the two sides' mean and does not "
    f"hold when |Δ| − margin exceeds it. "
    f"A side trained once: 'training spread unmeasured', with the GPU-hours {REPLICATES} more "
    f"training seeds would cost (steps × batch × length at the authors' ELF-B throughput, ≈ "
    f"{SLOTS_PER_GPU_HOUR_B / 1e9:.2f}B token slots per H200-hour, scaled by parameters) "
    f"(elf/report/trends.py).")


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


trend_runs = pairs.training_seed_runs


def _values(frame: pd.DataFrame, exp: Experiment, ref: PairRef, metric: str):
    """(means, SEs) over the training seeds of ``ref``'s run, in ``trend_runs`` order."""
    means, ses = [], []
    for run in trend_runs(exp, ref.run):
        row = frame[(frame["run"] == run) & (frame["sampler"] == ref.sampler)]
        if row.empty or metric not in row.columns:
            return None
        means.append(float(row[metric].iloc[0]))
        se = verdict_se(row.iloc[0], metric)
        ses.append(se if math.isfinite(se) else 0.0)
    return means, ses


def too_wide(means: list[float], ses: list[float]) -> bool:
    """A side's evaluation SE on some training seed above ``NOISY_FRACTION`` of its value."""
    return any(se > NOISY_FRACTION * abs(m) for m, se in zip(means, ses))


@functools.lru_cache(maxsize=None)
def _parameters(size: str) -> float:
    """Parameters of a named size at the paper's dims (counted on the meta device, once)."""
    from elf.model import preset_num_parameters

    try:
        return float(preset_num_parameters(size))
    except (KeyError, ValueError):
        return float(preset_num_parameters("ELF-B"))


def replicate_gpu_hours(exp: Experiment, run: str, replicates: int = REPLICATES) -> float:
    """GPU-hours of ``replicates`` more trainings of ``run`` (steps × batch × length token slots at
    ``SLOTS_PER_GPU_HOUR_B``, scaled by the model's parameters relative to ELF-B)."""
    settings = exp.run(run)
    length = exp.datasets[settings.dataset].max_length
    slots = settings.budget.steps * settings.budget.batch_size * length
    scale = _parameters(settings.model.size) / _parameters("ELF-B")
    return replicates * slots * scale / SLOTS_PER_GPU_HOUR_B


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
    wide = too_wide(l_means, l_ses) or too_wide(h_means, h_ses)
    if trend.relation == "equal":
        tolerance = EQUAL_FRACTION * abs(sum(l_means) / len(l_means) + sum(h_means) / len(h_means)) / 2
        if not wide and abs(delta) + margin <= tolerance:
            verdict = HOLDS
        elif not wide and abs(delta) - margin > tolerance:
            verdict = FAILS
    elif not wide and delta < -margin and all(d < 0 for d in per_seed):
        verdict = HOLDS
    elif not wide and delta > margin and all(d > 0 for d in per_seed):
        verdict = FAILS
    note = "; ".join(n for n in ((TOO_WIDE if wide else ""),
                                 _note(paired, l_means, h_means, trend, exp)) if n)
    return TrendResult(name, trend.claim, trend.metric, label(trend.lower), label(trend.higher),
                       delta, per_seed, eval_se, train_se, k, verdict, note)


def _note(paired: bool, l_means, h_means, trend, exp: Experiment) -> str:
    once = [ref.run for ref, m in ((trend.lower, l_means), (trend.higher, h_means)) if len(m) == 1]
    once = list(dict.fromkeys(once))
    if not once:
        return ""
    cost = sum(replicate_gpu_hours(exp, run) for run in once)
    hours = "< 0.01" if cost < 0.01 else f"≈ {cost:,.{0 if cost >= 10 else 2}f}"
    return (f"training spread unmeasured: {' and '.join(once)} trained once; {REPLICATES} more "
            f"training seeds {hours} GPU-hours")


def check_trends(frame: pd.DataFrame, exp: Experiment) -> list[TrendResult]:
    return [check_trend(name, trend, frame, exp) for name, trend in exp.trends.items()]


def trends_markdown(results: list[TrendResult]) -> str:
    """The verdict table (the review prints it; the README quotes it)."""
    if not results:
        return "No trend checks configured (`trends`).\n"
    resolved = sum(r.verdict != UNRESOLVED for r in results)
    lines = [f"{resolved} of {len(results)} checks resolve (margin: {MARGIN_SES:g} × the larger of the "
             "evaluation-seed and training-seed SEs of Δ = lower − higher; not resolved (spread too "
             f"wide) when a side's SE exceeds {NOISY_FRACTION:g} × its value).", "",
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
        for sampler in pairs.run_samplers(exp, runs[1]):   # those the replicates are evaluated on
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
