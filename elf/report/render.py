"""Rendering one figure or table of the config, and the replication review: load what its registry
entry needs, draw it with its template, write its files and its provenance sidecar.

``Sources`` are the report's inputs: the evaluation folders of the rule's inputs (``--evals``), and
the roots ``<results>/scores/_dataset``, ``<results>/runs``, ``<results>/trajectories`` and the paper
values.

    files = render_id(exp, "F4", sources, Path("reports"))
    review_files = render_review(exp, list(exp.figures), sources, Path("reports"), unstated=[])
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from elf import pairs
from elf.artifacts.layout import TRENDS_FILE, kind_dir, rendered_names
from elf.artifacts.names import SIDECAR_RUN_METADATA, SIDECAR_SHOWN
from elf.config import Experiment
from elf.io import atomic_path, write_json
from elf.artifacts import read_json
from elf.report import manifest, registry, review, trends
from elf.report.cells import TableInputs, write_table
from elf.report.paper import load_paper_values, paper_points
from elf.report.plotting import FigureInputs, write_figure
from elf.report.folders import EvalFolders
from elf.report.qualitative import load_qualitative
from elf.report.results import (MissingInputError, all_pairs, dataset_layout, figure_frame, figure_pairs,
                                ids_of_pair, load_dataset_scores, load_rows)
from elf.report.runs import load_runs_meta, metadata_entries


@dataclass(frozen=True)
class Sources:
    """Where the report reads from: evaluation folders, the "Dataset" scores, run directories,
    trajectories, and the paper's values."""
    evals: tuple[str | Path, ...] = ()
    dataset_scores: str | Path | None = None
    runs: str | Path | None = None
    trajectories: str | Path | None = None
    paper_values: str | Path = "config/paper_values.yaml"

    def need_evals(self) -> EvalFolders:
        return EvalFolders.of(self.evals)


def template(figure_id: str, kind: str) -> Callable:
    """The drawing function of an id (its registry entry's ``module.function`` under ``elf.report``),
    its options bound (a figure's "Dataset" line where it reads one)."""
    found = registry.entry(figure_id, kind)
    module, function = found.template.rsplit(".", 1)
    drawing = getattr(importlib.import_module(f"elf.report.{module}"), function)
    options = {**found.options, **({"dataset_line": True} if found.needs.dataset_line else {})}
    return lambda inputs: drawing(inputs, **options)


def draw(figure_id: str, kind: str, inputs):
    """Draw one figure (``(Figure, plotted numbers)``) or build one table (``Table``) with its template."""
    return template(figure_id, kind)(inputs)


def render_figure(figure_id: str, inputs: FigureInputs, out_dir: str | Path, pdf: bool = False,
                  dpi: int = 150) -> list[Path]:
    """Draw a figure and write its PNG [+ PDF] and CSV into the folder ``out_dir``."""
    fig, plotted = draw(figure_id, "figure", inputs)
    return write_figure(figure_id, fig, plotted, out_dir, pdf, dpi)


def render_table(table_id: str, inputs: TableInputs, out_dir: str | Path) -> list[Path]:
    """Build a table and write its CSV, Markdown and LaTeX into the folder ``out_dir``."""
    table = draw(table_id, "table", inputs)
    table.table_id = table_id
    return write_table(table, [Path(out_dir) / name for name in rendered_names(table_id, "table")])


def runs_meta_of(exp: Experiment, figure_id: str, sources: Sources) -> dict[str, dict]:
    """The run metadata an id reads (its ``needs.run_metadata``; {} for the others)."""
    if not registry.needs(figure_id, exp.figures[figure_id].kind).run_metadata:
        return {}
    if not sources.runs:
        raise MissingInputError(f"--runs-root is required to render {figure_id} (it reads the runs' "
                                "config.json / tokens.json)")
    return load_runs_meta(sources.runs, exp.figures[figure_id].runs)


def render_id(exp: Experiment, figure_id: str, sources: Sources, out: Path, pdf: bool = False
              ) -> list[Path]:
    """Write one figure's or table's files and its provenance sidecar."""
    settings = exp.figures[figure_id]
    needs = registry.needs(figure_id, settings.kind)
    frame = figure_frame(exp, figure_id, sources.need_evals())
    runs_meta = runs_meta_of(exp, figure_id, sources)
    paper_values = load_paper_values(sources.paper_values)
    points = paper_points(paper_values)
    scores, shown = {}, {}
    if needs.samples or needs.trajectory:
        shown = load_qualitative(exp, figure_id, needs, sources.need_evals(), sources.trajectories)
    if needs.dataset_line and not frame.empty:
        unconditional = frame[frame["task"] == "unconditional"]
        scores = load_dataset_scores(sources.dataset_scores, unconditional["dataset"])
    if settings.kind == "figure":
        inputs = FigureInputs(figure_id, settings.title, frame, points, scores, runs_meta, paper_values,
                              shown)
        files = render_figure(figure_id, inputs, kind_dir(out, "figure"), pdf=pdf)
    else:
        inputs = TableInputs(figure_id, settings.title, frame, points, exp, paper_values, runs_meta)
        files = render_table(figure_id, inputs, kind_dir(out, "table"))
    sidecar = manifest.write_sidecar(out, figure_id, settings.kind, settings.title, files, frame,
                                     scores, sources.paper_values)
    if runs_meta:  # the run metadata behind the numbers, beside the aggregates
        write_json(sidecar, {**read_json(sidecar), SIDECAR_RUN_METADATA: metadata_entries(runs_meta)})
    if shown:  # the samples, scores or trajectory shown
        write_json(sidecar, {**read_json(sidecar), SIDECAR_SHOWN: shown["files"]})
    return files


def render_review(exp: Experiment, ids: list[str], sources: Sources, out: Path,
                  unstated: list[str]) -> list[Path]:
    """Compare every matching paper value with ours and write the review (and its trend checks
    alone, ``trends.md``, for the README to quote)."""
    pairs = list(dict.fromkeys(p for i in ids for p in figure_pairs(exp, i))) \
        if ids != list(exp.figures) else all_pairs(exp)
    frame = load_rows(exp, pairs, sources.need_evals(), "review")
    paper_values = load_paper_values(sources.paper_values)
    points = paper_points(paper_values)
    comparisons = review.compare(frame, points, ids_of_pair(exp))
    checks = review.configuration_checks(
        {i: runs_meta_of(exp, i, sources) for i in ids if i in review.CHECKED_IDS}, paper_values)
    trend_text = trends_section(exp, sources)
    with atomic_path(out / TRENDS_FILE) as tmp:
        tmp.write_text(trend_text)
    doc = review.build_review(comparisons, review.unmatched(points, comparisons),
                              trend_text, exp.scale, list(exp.unstated) + unstated,
                              baseline_count=int(points["paper_run"].isna().sum()),
                              config_checks=checks,
                              data=[dataset_layout(exp, name) for name in exp.datasets])
    return review.write_review(doc, out)


def trends_section(exp: Experiment, sources: Sources) -> str:
    """The trend checks and the training-seed spread (elf/report/trends.py), as Markdown."""
    frame: pd.DataFrame = load_rows(exp, pairs.review_pairs(exp), sources.need_evals(), "trend checks")
    text = trends.trends_markdown(trends.check_trends(frame, exp))
    spread = trends.seed_spread_markdown(frame, exp)
    return text + (f"\n### Training-seed spread\n\n{spread}" if spread else "")
