"""The report's provenance: a sidecar per figure/table and ``reports/all``, the manifest of everything.

Layout under the report root ``out``:
``figures/<id>.png|.csv|.json`` (figures), ``tables/<id>.csv|.md|.tex|.json`` (tables),
``replication.md|.html`` (the review) and ``all`` (this manifest, written last).

``write_sidecar`` records, next to each figure or table, the files it wrote and every input its
numbers came from: each aggregate (path, sha256, run, sampler, and the score files the aggregate
itself lists), the dataset reference scores and the paper-values file. ``write_manifest`` reads the
sidecars, re-hashes every listed file (a file missing or changed since rendering is an error naming
the rule to rerun) and writes ``out/all`` atomically: per id its files with sha256, its CSV and the
aggregates behind its numbers; then the review files.
Run through the stage: ``elf report --manifest ...`` (see ``elf/stages/report.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from elf.artifacts.layout import MANIFEST, sidecar_path
from elf.artifacts.names import (PROVENANCE, SCORES, SIDECAR_AGGREGATES, SIDECAR_DATASET_SCORES,
                                 SIDECAR_FILES, SIDECAR_PAPER_VALUES, SIDECAR_RUN_METADATA, SIDECAR_SHOWN)
from elf.io import atomic_path, provenance, write_json
from elf.artifacts import file_sha256, read_json
from elf.report.results import MissingInputError


def _file_entry(path: Path, out_dir: Path) -> dict:
    return {"path": path.relative_to(out_dir).as_posix(), "sha256": file_sha256(path)}


def aggregate_entries(frame: pd.DataFrame) -> list[dict]:
    """The aggregates behind a frame's rows, with the score files each aggregate lists."""
    entries = []
    if frame.empty:
        return entries
    for _, row in frame.drop_duplicates("aggregate_path").iterrows():
        source = read_json(row["aggregate_path"]).get(PROVENANCE, {})
        entries.append({"path": row["aggregate_path"], "sha256": row["aggregate_sha256"],
                        "run": row["run"], "sampler": row["sampler"],
                        SCORES: source.get(SCORES, [])})
    return entries


def write_sidecar(out_dir: str | Path, figure_id: str, kind: str, title: str,
                  files: Iterable[Path], frame: pd.DataFrame, dataset_scores: dict[str, dict],
                  paper_values_path: str | Path) -> Path:
    """Record a figure's or table's files and inputs in ``<kind dir>/<id>.json`` (atomically)."""
    out_dir = Path(out_dir)
    record = {
        "id": figure_id, "kind": kind, "title": title,
        SIDECAR_FILES: [_file_entry(Path(f), out_dir) for f in files],
        SIDECAR_AGGREGATES: aggregate_entries(frame),
        SIDECAR_DATASET_SCORES: [{"dataset": name, "path": s["path"], "sha256": s["sha256"]}
                                 for name, s in dataset_scores.items()],
        SIDECAR_PAPER_VALUES: {"path": str(paper_values_path),
                               "sha256": file_sha256(paper_values_path)},
        PROVENANCE: provenance(),
    }
    path = sidecar_path(out_dir, figure_id, kind)
    write_json(path, record)
    return path


def _check(path: Path, recorded: str | None, what: str) -> str:
    """Current sha256 of ``path``; missing or changed since rendering is an error naming ``what``."""
    if not path.is_file():
        raise MissingInputError(f"missing {path}; rerun {what}")
    digest = file_sha256(path)
    if recorded is not None and digest != recorded:
        raise MissingInputError(f"{path} changed after it was used (recorded sha256 "
                                f"{recorded[:12]}…, now {digest[:12]}…); rerun {what}")
    return digest


def _id_section(out_dir: Path, figure_id: str, kind: str, title: str) -> list[str]:
    rule = f"the report rule for {figure_id} (`elf report --figure {figure_id}`)"
    sidecar = sidecar_path(out_dir, figure_id, kind)
    if not sidecar.is_file():
        raise MissingInputError(f"missing {sidecar}: {figure_id} has not been rendered; "
                                f"it is made by {rule}")
    record = read_json(sidecar)
    lines = [f"## {figure_id} — {title} ({kind})", "", "Files:"]
    for entry in record[SIDECAR_FILES]:
        path = out_dir / entry["path"]
        role = " (plotted numbers)" if kind == "figure" and path.suffix == ".csv" else ""
        lines.append(f"- `{path.as_posix()}`  sha256 {_check(path, entry['sha256'], rule)}{role}")
    lines.append(f"- `{sidecar.as_posix()}`  sha256 {file_sha256(sidecar)} (provenance)")
    lines += ["", "Numbers from:"]
    for agg in record[SIDECAR_AGGREGATES]:
        digest = _check(Path(agg["path"]), agg["sha256"], rule)
        lines.append(f"- `{agg['path']}`  sha256 {digest} (run {agg['run']}, sampler "
                     f"{agg['sampler']})")
        lines += [f"  - scores `{s.get('path')}`  sha256 {s.get('sha256')}"
                  for s in agg.get(SCORES, [])]
    for meta in record.get(SIDECAR_RUN_METADATA, []):
        digest = _check(Path(meta["path"]), meta["sha256"], rule)
        lines.append(f"- run metadata `{meta['path']}`  sha256 {digest} (run {meta['run']})")
    for shown in record.get(SIDECAR_SHOWN, []):
        digest = _check(Path(shown["path"]), shown["sha256"], rule)
        lines.append(f"- shown `{shown['path']}`  sha256 {digest}")
    if not record[SIDECAR_AGGREGATES] and not record.get(SIDECAR_RUN_METADATA):
        lines.append("- (no aggregates: built from the configuration and the paper's values)")
    for ref in record.get(SIDECAR_DATASET_SCORES, []):
        lines.append(f"- dataset reference `{ref['path']}`  sha256 {ref['sha256']}")
    paper = record[SIDECAR_PAPER_VALUES]
    lines += [f"- paper values `{paper['path']}`  sha256 {paper['sha256']}", ""]
    return lines


def build_manifest(figures: dict, out_dir: str | Path, review_files: Iterable[Path] = (),
                   header: Iterable[str] = ()) -> str:
    """The manifest text for ``figures`` (id → ``FigureSettings``), reading each id's sidecar."""
    out_dir = Path(out_dir)
    lines = ["# ELF report manifest", "", *header,
             f"Code version: {provenance()['code_version']}", "",
             "Every figure and table with its files (sha256) and the aggregates its numbers come "
             "from; each aggregate lists the score files it averaged.", ""]
    for figure_id, settings in figures.items():
        lines += _id_section(out_dir, figure_id, settings.kind, settings.title)
    review_files = list(review_files)
    if review_files:
        lines += ["## Replication review", ""]
        for path in review_files:
            digest = _check(Path(path), None, "the review rule (`elf report --review`)")
            lines.append(f"- `{Path(path).as_posix()}`  sha256 {digest}")
        lines.append("")
    return "\n".join(lines)


def write_manifest(figures: dict, out_dir: str | Path, review_files: Iterable[Path] = (),
                   header: Iterable[str] = ()) -> Path:
    """Write ``out/all`` atomically (after everything else)."""
    text = build_manifest(figures, out_dir, review_files, header)
    path = Path(out_dir) / MANIFEST
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return path
