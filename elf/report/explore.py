"""Aggregated results as one tidy pandas table, for interactive exploration (``reports/explore.ipynb``).

Reads (never writes) every ``<results>/evals/<run>/<group>/aggregates/<sampler>.json`` written by
``elf evaluate``
(``{"provenance", "run", "sampler", "metrics": {name: {"mean", "se", "n", "per_seed": {seed: value}}}}``)
and, when present, ``<results>/experiment.json`` (the configuration the DAG ran with) for the sampler
settings. One row per (run, sampler, metric):

    from elf.report.explore import load_aggregates, pivot_metrics, plot_frontier
    frame = load_aggregates("results")
    pivot_metrics(frame, run="base")            # sampler × metric means
    plot_frontier(frame, run="base")            # Gen. PPL against entropy, one point per sampler
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

COLUMNS = ("run", "sampler", "metric", "mean", "se", "n", "per_seed", "se_examples", "path")


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def aggregate_rows(path: str | Path) -> list[dict]:
    """The rows of one aggregate file (metrics that are not ``{mean, se, …}`` mappings are skipped).
    Run and sampler come from the file, else from its place ``<run>/<sampler>.json``."""
    path = Path(path)
    record = json.loads(path.read_text())
    run = str(record.get("run") or path.parent.name)
    sampler = str(record.get("sampler") or path.stem)
    rows = []
    for metric, stats in record.get("metrics", {}).items():
        if not isinstance(stats, dict):
            continue
        per_seed = {str(seed): _number(v) for seed, v in (stats.get("per_seed") or {}).items()}
        rows.append({"run": run, "sampler": sampler, "metric": metric,
                     "mean": _number(stats.get("mean")), "se": _number(stats.get("se")),
                     "n": int(stats.get("n", len(per_seed))), "per_seed": per_seed,
                     "se_examples": _number(stats.get("se_examples")), "path": str(path)})
    return rows


def load_aggregates(results_root: str | Path) -> pd.DataFrame:
    """Every aggregate under ``<results_root>/evals`` as rows (columns ``COLUMNS``), sorted by run,
    sampler and metric. A missing evaluations folder is an error naming it."""
    folder = Path(results_root) / "evals"
    if not folder.is_dir():
        raise FileNotFoundError(f"no evaluations folder {folder}: run the DAG (snakemake) first, or "
                                "point `results` at the results root of a finished run")
    rows = [row for path in sorted(folder.glob("*/*/aggregates/*.json")) for row in aggregate_rows(path)]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.sort_values(["run", "sampler", "metric"], ignore_index=True)


def select(frame: pd.DataFrame, run: str | list[str] | None = None,
           sampler: str | list[str] | None = None,
           metric: str | list[str] | None = None) -> pd.DataFrame:
    """The rows of the given run(s), sampler(s) and metric(s) (None: all)."""
    keep = pd.Series(True, index=frame.index)
    for column, wanted in (("run", run), ("sampler", sampler), ("metric", metric)):
        if wanted is not None:
            keep &= frame[column].isin([wanted] if isinstance(wanted, str) else list(wanted))
    return frame[keep]


def pivot_metrics(frame: pd.DataFrame, run: str | None = None, value: str = "mean") -> pd.DataFrame:
    """A (run, sampler) × metric table of ``value`` (``mean``, ``se`` or ``n``); one run: sampler rows."""
    rows = select(frame, run=run)
    index = "sampler" if run is not None else ["run", "sampler"]
    return rows.pivot_table(index=index, columns="metric", values=value, aggfunc="first")


def per_seed(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, sampler, metric, seed) with that seed's ``value``."""
    rows = [{"run": r.run, "sampler": r.sampler, "metric": r.metric, "seed": seed, "value": v}
            for r in frame.itertuples() for seed, v in r.per_seed.items()]
    return pd.DataFrame(rows, columns=["run", "sampler", "metric", "seed", "value"])


def sampler_settings(results_root: str | Path) -> pd.DataFrame:
    """The resolved sampler settings (one row per sampler name) from ``<results>/experiment.json``;
    empty when the file is absent."""
    from elf.config import SamplerSettings, from_dict, to_dict

    path = Path(results_root) / "experiment.json"
    if not path.is_file():
        return pd.DataFrame(columns=["sampler"])
    samplers = json.loads(path.read_text()).get("samplers", {})
    rows = [{"sampler": name, **to_dict(from_dict(SamplerSettings, spec, f"samplers.{name}"))}
            for name, spec in samplers.items()]
    return pd.DataFrame(rows)


def frontier(frame: pd.DataFrame, run: str, x: str = "entropy", y: str = "gen_ppl") -> pd.DataFrame:
    """One row per sampler of ``run`` with ``x``, ``y`` and their SEs (samplers lacking either are
    dropped), in the frame's sampler order."""
    rows = select(frame, run=run, metric=[x, y])
    means = rows.pivot_table(index="sampler", columns="metric", values="mean", aggfunc="first")
    ses = rows.pivot_table(index="sampler", columns="metric", values="se", aggfunc="first")
    if x not in means or y not in means:
        return pd.DataFrame(columns=["sampler", x, y, f"{x}_se", f"{y}_se"])
    table = means[[x, y]].join(ses[[x, y]].add_suffix("_se")).dropna(subset=[x, y])
    return table.reset_index().rename_axis(columns=None)


def plot_frontier(frame: pd.DataFrame, run: str, x: str = "entropy", y: str = "gen_ppl", ax=None):
    """Draw ``y`` against ``x`` (± SE) for each sampler of ``run``; returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    points = frontier(frame, run, x, y)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))
    ax.errorbar(points[x], points[y], xerr=points[f"{x}_se"], yerr=points[f"{y}_se"], fmt="o")
    for row in points.itertuples():
        ax.annotate(row.sampler, (getattr(row, x), getattr(row, y)), fontsize=8,
                    xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel=x, ylabel=y, title=f"{run}: {y} against {x}")
    return ax
