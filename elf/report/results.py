"""Our results as the report reads them: one row per (run, sampler) with its settings and the mean,
seed SE and seed count of every metric of its aggregate, and the scores of real held-out text.

Reads (never writes):
- the aggregate of each (run, sampler) in the evaluation folder given that holds it (made by the
  ``evaluate`` rule, ``elf evaluate``; found by ``elf.report.folders.EvalFolders``):
  ``{"provenance", "run", "sampler", "metrics": {name: {"mean", "se", "n", "per_seed"}}}``;
- ``<dataset_scores_root>/<dataset>.json``: Gen. PPL / entropy of held-out real text ("Dataset" line)
  and, under ``calibration``, of the same rows shuffled and of unigram draws (calibration lines).

``figure_frame(exp, id, folders)`` gives one row per (run, sampler) of a figure or table:
run and sampler settings, metric means (``gen_ppl``), seed SEs (``gen_ppl_se``), seed counts
(``gen_ppl_n``), per-example SEs where the aggregate carries them (metric ``rouge1_se`` →
column ``rouge1_example_se``: their mean over seeds), the SE of the seed mean from the samples'
own spread (``se_samples`` → ``gen_ppl_sample_se``, elf/evaluate/aggregate.py),
``aggregate_path`` and ``aggregate_sha256``. A row's ``split`` is the
split a conditional (run, sampler) is scored on (``scored_split``; None when unconditional).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from elf import pairs
from elf.artifacts.layout import dataset_scores_path
from elf.artifacts.names import METRICS
from elf.config import Experiment, SamplerSettings
from elf.artifacts import file_sha256, read_json
from elf.report.folders import AGGREGATE_RULE, EvalFolders, MissingInputError

DATASET_SCORE_RULE = "the dataset-score rule (`elf score` on held-out real text)"
SAMPLER_COLUMNS = ("method", "steps", "gamma", "grid", "sc_cfg", "input_cfg")


# --------------------------------------------------------------------------------------------------
# Every sampler setting (the frame carries them all, so lines split on any setting that varies).
ALL_SAMPLER_COLUMNS = tuple(f.name for f in dataclasses.fields(SamplerSettings))

# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# Pretrained T5 encoders by name → embedding width (paper F11 panels: small/base/large).
T5_WIDTHS = {"small": 512, "base": 768, "large": 1024}

# --------------------------------------------------------------------------------------------------
def load_aggregate(path: str | Path, what: str = "") -> dict:
    """Read one aggregate JSON; a missing file raises ``MissingInputError`` naming it and its rule."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(
            f"missing aggregate {path}{' (' + what + ')' if what else ''}; it is made by "
            f"{AGGREGATE_RULE}: run `snakemake {path}` or the whole DAG first")
    return read_json(path)


def _number(value: Any) -> float:
    """A JSON number, or NaN for null, missing or non-numeric values."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def metric_columns(metrics: dict) -> dict[str, float]:
    """Flatten an aggregate's metrics into columns (see module docstring for the names)."""
    columns: dict[str, float] = {}
    for name, stats in metrics.items():
        if not isinstance(stats, dict):
            continue  # e.g. a text field such as a metric signature
        stem = name[:-3] if name.endswith("_se") else None
        if stem and stem in metrics:
            # Per-example standard error reported as its own metric: mean over seeds.
            columns[f"{stem}_example_se"] = _number(stats.get("mean"))
            continue
        columns[name] = _number(stats.get("mean"))
        columns[f"{name}_se"] = _number(stats.get("se"))
        columns[f"{name}_n"] = _number(stats.get("n"))
        if "se_samples" in stats:  # the SE of the seed mean from the samples' own spread
            columns[f"{name}_sample_se"] = _number(stats["se_samples"])
        if "se_examples" in stats:  # `elf aggregate` attaches ROUGE's per-example SE (one seed)
            columns.setdefault(f"{name}_example_se", _number(stats["se_examples"]))
    return columns


def embedding_width(exp: Experiment, embedding: str) -> float:
    """Width d of an embedding's encoder (built: d_model; pretrained T5: by name), else NaN."""
    settings = exp.embeddings.get(embedding)
    encoder = exp.encoders.get(settings.encoder) if settings else None
    if encoder is None:
        return math.nan
    if encoder.source == "build":
        return float(encoder.d_model)
    for word, width in T5_WIDTHS.items():
        if word in encoder.name_or_path.lower():
            return float(width)
    return math.nan


def run_columns(exp: Experiment, run_name: str) -> dict[str, Any]:
    """Descriptive columns of one run (what figure legends vary over)."""
    run = exp.run(run_name)
    dataset = exp.datasets.get(run.dataset)
    embedding = exp.embeddings.get(run.embedding)
    return {
        "run": run_name,
        "paper_run": run.paper_run,
        "run_kind": run.kind,
        "dataset": run.dataset,
        "task": dataset.task if dataset else None,
        "embedding": run.embedding,
        "embedding_kind": embedding.kind if embedding else None,
        "embedding_width": embedding_width(exp, run.embedding),
        "model_size": run.model.size,
        "bottleneck": run.model.bottleneck,
        "conditioning": run.model.conditioning,
        "prediction": run.model.prediction,
        "decode_head": run.model.decode_head,
        "decode_prob": run.objective.decode_prob,
        "optim": run.optim.name,
        "teacher": run.teacher,
        "init_from": run.init_from,
        "student_steps": run.distill.student_steps if run.distill else None,
        "teacher_substeps": run.distill.teacher_substeps if run.distill else None,
    }


def sampler_columns(exp: Experiment, sampler_name: str) -> dict[str, Any]:
    """The sampler settings a figure varies over."""
    sampler = exp.samplers[sampler_name]
    return {"sampler": sampler_name, **{col: getattr(sampler, col) for col in ALL_SAMPLER_COLUMNS}}


def figure_pairs(exp: Experiment, figure_id: str) -> list[tuple[str, str]]:
    """The (run, sampler) pairs a figure or table needs, in config order."""
    if figure_id not in exp.figures:
        raise KeyError(f"figure/table '{figure_id}' is not defined under `figures` "
                       f"(defined: {', '.join(exp.figures)})")
    return pairs.figure_pairs(exp, figure_id)


def scored_split(exp: Experiment, run: str, sampler: str) -> str | None:
    """The split a conditional (run, sampler) is sampled and scored on: the sampler's own, else
    ``evaluation.split`` (as the sample rule passes it); None for an unconditional run."""
    dataset = exp.datasets.get(exp.run(run).dataset)
    if dataset is None or dataset.task == "unconditional":
        return None
    return exp.samplers[sampler].split or exp.evaluation.split


def dataset_layout(exp: Experiment, name: str) -> str:
    """One line on a dataset: where it comes from (with revisions) and its sequence layout."""
    ds = exp.datasets[name]
    where = f"{ds.source} {ds.name}" + (f"@{ds.revision}" if ds.revision else "")
    if ds.test is not None:
        where += f"; test split from {ds.test.source} {ds.test.name}" + \
            (f" {ds.test.subset}" if ds.test.subset else "") + \
            (f"@{ds.test.revision}" if ds.test.revision else "")
    if ds.target_tokens is None:
        layout = f"{ds.max_length}-token rows"
    else:
        layout = (f"source ≤ {ds.max_input_length} + target {ds.target_tokens} tokens "
                  f"(max_length {ds.max_length})")
    return f"{name} ({ds.task}): {layout}; {where}"


def load_rows(exp: Experiment, pairs: Iterable[tuple[str, str]], folders: EvalFolders,
              what: str = "") -> pd.DataFrame:
    """One row per (run, sampler) pair, from the folders given: settings, metrics and the
    aggregate's path and hash."""
    rows = []
    for run, sampler in pairs:
        path = folders.aggregate(run, sampler)
        aggregate = load_aggregate(path, f"{what + ': ' if what else ''}run {run}, sampler {sampler}")
        named = (aggregate.get("run", run), aggregate.get("sampler", sampler))
        if named != (run, sampler):
            raise MissingInputError(f"{path} is the aggregate of run {named[0]}, sampler {named[1]}, "
                                    f"not of run {run}, sampler {sampler}: a copied or moved file; "
                                    "rerun the `evaluate` rule")
        rows.append({**run_columns(exp, run), **sampler_columns(exp, sampler),
                     "split": scored_split(exp, run, sampler),
                     **metric_columns(aggregate.get(METRICS, {})),
                     "bleu_signature": aggregate.get("bleu_signature"),
                     "aggregate_path": str(path), "aggregate_sha256": file_sha256(path)})
    frame = pd.DataFrame(rows)
    if frame.empty:
        frame = pd.DataFrame(columns=["run", "paper_run", "sampler", *SAMPLER_COLUMNS,
                                      "aggregate_path", "aggregate_sha256"])
    return frame


def figure_frame(exp: Experiment, figure_id: str, folders: EvalFolders) -> pd.DataFrame:
    """The rows of one figure or table (see module docstring for the columns)."""
    return load_rows(exp, figure_pairs(exp, figure_id), folders, f"figure {figure_id}")


def all_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """Every distinct (run, sampler) pair any figure or table needs, in config order."""
    seen: dict[tuple[str, str], None] = {}
    for figure_id in exp.figures:
        for pair in figure_pairs(exp, figure_id):
            seen.setdefault(pair, None)
    return list(seen)


def ids_of_pair(exp: Experiment) -> dict[tuple[str, str], list[str]]:
    """Which figure/table ids use each (run, sampler) pair."""
    ids: dict[tuple[str, str], list[str]] = {}
    for figure_id in exp.figures:
        for pair in figure_pairs(exp, figure_id):
            ids.setdefault(pair, []).append(figure_id)
    return ids


def load_dataset_scores(root: str | Path | None, datasets: Iterable[str]) -> dict[str, dict]:
    """Reference scores of real text per dataset name (``{}`` when no root is given)."""
    if root is None:
        return {}
    scores = {}
    for name in dict.fromkeys(datasets):
        path = dataset_scores_path(root, name)
        if not path.is_file():
            raise MissingInputError(f"missing dataset reference scores {path}; they are made by "
                                    f"{DATASET_SCORE_RULE}")
        data = read_json(path)
        scores[name] = {"metrics": _finite_metrics(data.get(METRICS, {})),
                        "calibration": {how: _finite_metrics(values) for how, values
                                        in data.get("calibration", {}).items()},
                        "path": str(path), "sha256": file_sha256(path)}
    return scores


def _finite_metrics(metrics: dict) -> dict[str, float]:
    numbers = {k: _number(v) for k, v in metrics.items()}
    return {k: v for k, v in numbers.items() if math.isfinite(v)}


def reported_se(row: pd.Series | dict, metric: str, prefer: str = "seeds") -> float:
    """The SE to show for a metric: over seeds (n ≥ 2) or across examples, per ``prefer``; NaN if none.

    The paper's T9 SE is over 6 evaluation seeds; its T1 XSum SE is across evaluation examples.
    """
    seed_se = _get(row, f"{metric}_se")
    seed_n = _get(row, f"{metric}_n")
    if not (seed_n >= 2):
        seed_se = math.nan
    example_se = _get(row, f"{metric}_example_se")
    order = [seed_se, example_se] if prefer == "seeds" else [example_se, seed_se]
    for value in order:
        if math.isfinite(value):
            return value
    return math.nan


def verdict_se(row: pd.Series | dict, metric: str) -> float:
    """The SE a verdict uses for one of our numbers (the review, the trend checks): the larger of
    the SE over evaluation seeds (n ≥ 2) and the SE of the seed mean from the samples' own spread
    (``<metric>_sample_se``) — conservative, and defined from one seed; else the per-example SE;
    NaN if none."""
    seed_se = _get(row, f"{metric}_se") if _get(row, f"{metric}_n") >= 2 else math.nan
    known = [v for v in (seed_se, _get(row, f"{metric}_sample_se")) if math.isfinite(v)]
    if known:
        return max(known)
    return _get(row, f"{metric}_example_se")


def _get(row: pd.Series | dict, key: str) -> float:
    value = row.get(key, math.nan)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
