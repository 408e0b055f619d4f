"""Where files lie inside the folders the stages write: an evaluation folder, a folder of seed files,
a run directory under its root, and the report root. Paths only (no I/O); ``elf.plan`` places these
folders in the DAG (``<results>/evals/<run>/<group>``, ...).

An evaluation folder (``elf evaluate --out-dir``)::

    samples/<sampler>/seed<k>.jsonl   scores/<sampler>/seed<k>.json   aggregates/<sampler>.json

The report root (``elf report --out``)::

    figures/<id>.png|.csv|.json   tables/<id>.csv|.md|.tex|.json   replication.md|.html   trends.md   all
"""

from __future__ import annotations

import re
from pathlib import Path

from elf.artifacts.names import EMA_WEIGHTS, RUN_CONFIG, TOKENS_FILE

SEED_FILE = re.compile(r"^seed(\d+)$")  # the stem of a seed's samples or score file
SAMPLES_SUFFIX, SCORES_SUFFIX = ".jsonl", ".json"


def seed_file(folder: str | Path, seed: int, suffix: str) -> Path:
    """``<folder>/seed<k><suffix>``: one evaluation seed's samples (.jsonl) or scores (.json)."""
    return Path(folder) / f"seed{seed}{suffix}"


# --------------------------------------------------------------------------------------------------
# An evaluation folder
# --------------------------------------------------------------------------------------------------

def samples_dir(folder: str | Path, sampler: str) -> Path:
    return Path(folder) / "samples" / sampler


def scores_dir(folder: str | Path, sampler: str) -> Path:
    return Path(folder) / "scores" / sampler


def aggregates_dir(folder: str | Path) -> Path:
    return Path(folder) / "aggregates"


def aggregate_file(folder: str | Path, sampler: str) -> Path:
    return aggregates_dir(folder) / f"{sampler}.json"


def samples_path(folder: str | Path, sampler: str, seed: int) -> Path:
    return seed_file(samples_dir(folder, sampler), seed, SAMPLES_SUFFIX)


def scores_path(folder: str | Path, sampler: str, seed: int) -> Path:
    return seed_file(scores_dir(folder, sampler), seed, SCORES_SUFFIX)


# --------------------------------------------------------------------------------------------------
# Data, stores, runs, evaluation folders, reference scores and trajectories under the results root
# --------------------------------------------------------------------------------------------------

def tokens_dir(results: str | Path, dataset: str) -> str:
    """A dataset's packed token ids (``elf prepare --out``)."""
    return f"{results}/data/{dataset}/tokens"


def stores_dir(results: str | Path, dataset: str, embedding: str) -> str:
    """The folder of a dataset's embedding stores under one embedding, a store per split."""
    return f"{results}/embeddings/{dataset}/{embedding}"


def store_path(results: str | Path, dataset: str, embedding: str, split: str) -> str:
    """One split's embedding store (``elf embed --out``); with ``{wildcards}`` a rule's pattern."""
    return f"{stores_dir(results, dataset, embedding)}/{split}.zarr"


def runs_root(results: str | Path) -> str:
    return f"{results}/runs"


def evals_root(results: str | Path) -> str:
    return f"{results}/evals"


def eval_dir(evals: str | Path, run: str, group: str) -> Path:
    """One evaluation job's folder (``elf evaluate --out-dir``): every sampler of its group."""
    return Path(evals) / run / group


def eval_dir_run(folder: str | Path) -> str:
    """The run whose evaluation folder ``folder`` (an ``eval_dir``) is."""
    return Path(folder).parent.name


def eval_dirs_under(evals: str | Path) -> list[Path]:
    """Every evaluation folder ``<evals>/<run>/<group>/``, in name order."""
    return sorted(p for p in Path(evals).glob("*/*") if p.is_dir())


def run_dir(runs_root: str | Path, run: str) -> Path:
    return Path(runs_root) / run


def run_weights(runs_root: str | Path, run: str) -> Path:
    """A run's EMA weights: the output of its rule (config.json and tokens.json sit beside it)."""
    return run_dir(runs_root, run) / EMA_WEIGHTS


def run_config_file(runs_root: str | Path, run: str) -> Path:
    return run_dir(runs_root, run) / RUN_CONFIG


def run_tokens_file(runs_root: str | Path, run: str) -> Path:
    return run_dir(runs_root, run) / TOKENS_FILE


def dataset_scores_path(root: str | Path, dataset: str) -> Path:
    """The scores of a dataset's held-out real text (the figures' "Dataset" line)."""
    return Path(root) / f"{dataset}.json"


def trajectory_path(root: str | Path, run: str, sampler: str) -> Path:
    return Path(root) / run / f"{sampler}.json"


# --------------------------------------------------------------------------------------------------
# The report root
# --------------------------------------------------------------------------------------------------

KIND_DIRS = {"figure": "figures", "table": "tables"}
RENDERED_SUFFIXES = {"figure": (".png", ".csv"), "table": (".csv", ".md", ".tex")}
SIDECAR_SUFFIX = ".json"
MANIFEST = "all"
REVIEW_FILES = ("replication.md", "replication.html")
TRENDS_FILE = "trends.md"


def kind_dir(out: str | Path, kind: str) -> Path:
    """``<out>/figures`` or ``<out>/tables``."""
    return Path(out) / KIND_DIRS[kind]


def rendered_names(figure_id: str, kind: str, pdf: bool = False) -> list[str]:
    """The names of the files a figure (PNG, plotted numbers as CSV[, PDF]) or a table (CSV,
    Markdown, LaTeX) is rendered to."""
    suffixes = RENDERED_SUFFIXES[kind] + ((".pdf",) if pdf and kind == "figure" else ())
    return [f"{figure_id}{suffix}" for suffix in suffixes]


def rendered_files(out: str | Path, figure_id: str, kind: str, pdf: bool = False) -> list[Path]:
    """The rendered files of a figure or table under the report root ``out``."""
    return [kind_dir(out, kind) / name for name in rendered_names(figure_id, kind, pdf)]


def sidecar_path(out: str | Path, figure_id: str, kind: str) -> Path:
    """The provenance sidecar beside a figure's or table's files."""
    return kind_dir(out, kind) / f"{figure_id}{SIDECAR_SUFFIX}"


def review_paths(out: str | Path) -> list[Path]:
    return [Path(out) / name for name in REVIEW_FILES]
