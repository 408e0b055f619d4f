"""Seed aggregation (spec §6): mean ± standard error across evaluation seeds (paper: six seeds, 0–5).

Pure computation on metric dicts; ``elf aggregate`` reads the score files and writes the result.
SE = sample std (ddof = 1) / sqrt(n) across seeds; with one seed SE is 0.0 and ``se_note`` says so.
A metric's SE over its own samples or examples (``gen_ppl_se``, ``entropy_se``, ``bleu_se``,
``rouge1_se`` …, computed where the per-sample values exist: elf/evaluate/uncertainty.py) is
aggregated like any metric (its mean over seeds) and is also attached to its metric as
``se_samples``: the SE of the mean over seeds that the per-seed SEs imply, sqrt(Σ se_k²) / K (one
seed: its own SE). It is what the replication review compares with, even from one seed. ROUGE's
per-example SE is also kept as ``se_examples`` (one seed, the paper's XSum ± ) or
``se_examples_per_seed`` (several).

    from elf.evaluate.aggregate import aggregate_metrics
    aggregate_metrics({"0": {"gen_ppl": 31.2, ...}, "1": {...}})
"""

from __future__ import annotations

import math
from typing import Mapping

from elf.artifacts.names import PER_SEED
from elf.evaluate.textmetrics import ROUGE_TYPES, mean_and_se
from elf.evaluate.uncertainty import seed_mean_se

ONE_SEED_NOTE = "one seed only: no spread across seeds to estimate; se set to 0.0"
EXAMPLE_SE_KEYS = {f"{rouge_type}_se": rouge_type for rouge_type in ROUGE_TYPES}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def aggregate_values(per_seed: Mapping[str, float | None]) -> dict:
    """``{"mean", "se", "n", "per_seed"}`` (+ ``se_note`` for n = 1). A missing or non-finite value
    (a seed with nothing scored) makes mean and se None."""
    values = list(per_seed.values())
    entry: dict = {"n": len(values), PER_SEED: dict(per_seed)}
    if any(v is None or not math.isfinite(v) for v in values):
        entry.update(mean=None, se=None)
    else:
        entry["mean"], entry["se"] = mean_and_se([float(v) for v in values])
    if len(values) == 1:
        entry["se_note"] = ONE_SEED_NOTE
    return entry


def aggregate_metrics(metrics_by_seed: Mapping[str, Mapping]) -> dict:
    """Aggregate every numeric metric across seeds (keys: seed labels, values: score ``metrics``).
    Every seed must report the same metrics."""
    if not metrics_by_seed:
        raise ValueError("no score files to aggregate")
    names = {seed: sorted(k for k, v in m.items() if _is_number(v) or v is None)
             for seed, m in metrics_by_seed.items()}
    first_seed, first_names = next(iter(names.items()))
    for seed, seed_names in names.items():
        if seed_names != first_names:
            raise ValueError(f"seed {seed} reports metrics {seed_names}, seed {first_seed} {first_names}")
    aggregated = {}
    for name in first_names:
        aggregated[name] = aggregate_values({s: m[name] for s, m in metrics_by_seed.items()})
    for name in first_names:
        if name.endswith("_se") and name[:-3] in aggregated:
            aggregated[name[:-3]]["se_samples"] = seed_mean_se(
                [m[name] for m in metrics_by_seed.values()])
    for se_key, rouge_type in EXAMPLE_SE_KEYS.items():
        if se_key in first_names and rouge_type in aggregated:
            per_seed = {s: m[se_key] for s, m in metrics_by_seed.items()}
            if len(per_seed) == 1:
                aggregated[rouge_type]["se_examples"] = next(iter(per_seed.values()))
            else:
                aggregated[rouge_type]["se_examples_per_seed"] = per_seed
    return aggregated
