"""``elf report``: render the paper's figures and tables from aggregated scores, the replication
review and the manifest ``<out>/all``.

Reads the evaluation folders under ``<evals-root>`` (``elf evaluate``: each (run, sampler)'s
aggregate and, for F8, the first seed's samples and per-sample scores; ``elf.plan`` gives the paths),
``<dataset-scores-root>/
<dataset>.json`` (real-text reference scores, for the "Dataset" lines), ``<runs-root>/<run>/
config.json`` and ``tokens.json`` (run metadata, for T6/T7/T8/F7c/F9b and the review's configuration
checks), for F18 ``<trajectories-root>/<run>/<sampler>.json`` (``elf trajectory``),
the paper's values (``config/paper_values.yaml``) and the experiment config. Writes,
atomically, under ``--out`` (default: the config's ``reports``):
  figures/<id>.png, figures/<id>.csv (plotted numbers), figures/<id>.json (provenance)
  tables/<id>.csv, tables/<id>.md, tables/<id>.tex, tables/<id>.json (provenance)
  replication.md, replication.html, trends.md (its trend checks alone), and last ``all`` (the manifest).

Modes (one Snakemake rule per figure/table, one for the review, one for the manifest):
  elf report --config C --evals-root E --dataset-scores-root D --runs-root RUNS \
      --paper-values P --out reports
      everything (``--only ID ...`` limits it to some ids);
  ... --figure F4      only that figure's (or table's) files (provenance sidecar: the aggregates,
                       and for T6/T7/T8/F7c/F9b the run metadata files, with sha256);
  ... --review         only replication.md/.html (from the aggregates);
  ... --manifest       only ``all``, from the already-rendered files.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from tqdm import tqdm

from elf import plan
from elf.cli import ElfError
from elf.config import ConfigError, Experiment, parse_experiment
from elf.io import read_json, sha256_file, write_json
from elf.report import figures as figures_mod
from elf.report import manifest, review, tables, trends
from elf.report.loading import (RUN_METADATA_IDS, MissingInputError, all_pairs, dataset_layout,
                                figure_frame, figure_pairs, ids_of_pair, load_dataset_scores,
                                load_paper_values, load_rows, load_runs_meta, metadata_entries,
                                paper_points)
from elf.report.qualitative import QUALITATIVE_FIGURES, QUALITATIVE_IDS, load_qualitative


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="figures, tables, replication review and manifest",
        description=__doc__.split("\n\n")[0] + " Modes: --figure ID, --review, --manifest; "
        "default renders everything and writes the manifest last.")
    parser.add_argument("--config", required=True, help="experiment YAML (config/config.yaml)")
    parser.add_argument("--evals-root", help="folder of the evaluation folders <run>/<group>/ "
                        "(aggregates; F8's samples and scores)")
    parser.add_argument("--dataset-scores-root", help="folder of <dataset>.json reference scores "
                        "(Dataset lines; omitted: no Dataset line)")
    parser.add_argument("--trajectories-root", help="folder of <run>/<sampler>.json trajectories "
                        "(F18)")
    parser.add_argument("--runs-root", help="folder of <run>/config.json (and tokens.json) run "
                        "metadata, for the configuration tables and token bars "
                        f"({', '.join(RUN_METADATA_IDS)})")
    parser.add_argument("--paper-values", default="config/paper_values.yaml",
                        help="the paper's values (default: config/paper_values.yaml)")
    parser.add_argument("--out", help="report root (default: the config's `reports`)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="render only these ids")
    parser.add_argument("--unstated-settings", metavar="FILE",
                        help="YAML list (or text lines) of settings the paper does not state, "
                        "printed in the review")
    parser.add_argument("--pdf", action="store_true", help="also write figures as PDF")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--figure", metavar="ID", help="write only this figure's/table's files")
    mode.add_argument("--review", action="store_true", help="write only the replication review")
    mode.add_argument("--manifest", action="store_true", help="write only the manifest `all`")
    parser.set_defaults(func=run)


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    if not path.is_file():
        raise ElfError(f"config file {path} does not exist")
    try:
        return parse_experiment(yaml.safe_load(path.read_text()) or {})
    except ConfigError as err:
        raise ElfError(f"{path}: {err}") from None


def load_unstated(path: str | None) -> list[str]:
    """Settings the paper does not state: a YAML list, a mapping (``key: text``) or text lines."""
    if not path:
        return []
    if not Path(path).exists():
        raise ElfError(f"--unstated-settings file {path} does not exist")
    text = Path(path).read_text()
    data = yaml.safe_load(text)
    if isinstance(data, list):
        return [str(item) for item in data]
    if isinstance(data, dict):
        return [f"{key}: {value}" for key, value in data.items()]
    return [line.strip() for line in text.splitlines() if line.strip()]


def _selected(exp: Experiment, ids: list[str] | None) -> list[str]:
    unknown = [i for i in ids or [] if i not in exp.figures]
    if unknown:
        raise ElfError(f"unknown figure/table id(s) {', '.join(unknown)}; defined under "
                       f"`figures`: {', '.join(exp.figures)}")
    return list(ids) if ids else list(exp.figures)


def _need_evals(args) -> Path:
    if not args.evals_root:
        raise ElfError("--evals-root is required to render figures, tables or the review")
    return Path(args.evals_root)


def runs_meta_of(exp: Experiment, figure_id: str, args) -> dict[str, dict]:
    """The run metadata an id reads (``RUN_METADATA_IDS``; {} for the others)."""
    if figure_id not in RUN_METADATA_IDS:
        return {}
    if not args.runs_root:
        raise ElfError(f"--runs-root is required to render {figure_id} (it reads the runs' "
                       "config.json / tokens.json)")
    return load_runs_meta(args.runs_root, exp.figures[figure_id].runs)


def render_id(exp: Experiment, figure_id: str, args, out: Path) -> list[Path]:
    """Write one figure's or table's files and its provenance sidecar."""
    settings = exp.figures[figure_id]
    frame = figure_frame(exp, figure_id, _need_evals(args))
    runs_meta = runs_meta_of(exp, figure_id, args)
    paper_values = load_paper_values(args.paper_values)
    points = paper_points(paper_values)
    scores = {}
    qualitative = None
    if figure_id in QUALITATIVE_IDS:
        qualitative = load_qualitative(exp, figure_id, args.evals_root, args.trajectories_root)
        fig, shown = QUALITATIVE_FIGURES[figure_id](qualitative, paper_values)
        files = figures_mod.write_figure(figure_id, fig, shown, manifest.kind_dir(out, "figure"),
                                         pdf=args.pdf)
    elif settings.kind == "figure":
        if figure_id in figures_mod.DATASET_LINE_IDS and not frame.empty:
            unconditional = frame[frame["task"] == "unconditional"]
            scores = load_dataset_scores(args.dataset_scores_root, unconditional["dataset"])
        inputs = figures_mod.FigureInputs(figure_id, settings.title, frame, points, scores,
                                          runs_meta, paper_values)
        files = figures_mod.render_figure(figure_id, inputs, manifest.kind_dir(out, "figure"),
                                          pdf=args.pdf)
    else:
        inputs = tables.TableInputs(figure_id, settings.title, frame, points, exp, paper_values,
                                    runs_meta)
        files = tables.render_table(figure_id, inputs, manifest.kind_dir(out, "table"))
    sidecar = manifest.write_sidecar(out, figure_id, settings.kind, settings.title, files, frame,
                                     scores, args.paper_values)
    if runs_meta:  # the run metadata behind the numbers, beside the aggregates
        write_json(sidecar, {**read_json(sidecar), "run_metadata": metadata_entries(runs_meta)})
    if qualitative:  # the samples, scores or trajectory shown
        write_json(sidecar, {**read_json(sidecar), "qualitative_inputs": qualitative["files"]})
    return files


def render_review(exp: Experiment, ids: list[str], args, out: Path) -> list[Path]:
    """Compare every matching paper value with ours and write the review."""
    pairs = list(dict.fromkeys(p for i in ids for p in figure_pairs(exp, i))) \
        if ids != list(exp.figures) else all_pairs(exp)
    frame = load_rows(exp, pairs, _need_evals(args), "review")
    paper_values = load_paper_values(args.paper_values)
    points = paper_points(paper_values)
    comparisons = review.compare(frame, points, ids_of_pair(exp))
    checks = review.configuration_checks(
        {i: runs_meta_of(exp, i, args) for i in ids if i in review.CHECKED_IDS}, paper_values)
    trend_text = trends_section(exp, args)
    doc = review.build_review(comparisons, review.unmatched(points, comparisons),
                              trend_text, exp.scale,
                              list(exp.unstated) + load_unstated(args.unstated_settings),
                              baseline_count=int(points["paper_run"].isna().sum()),
                              config_checks=checks,
                              data=[dataset_layout(exp, name) for name in exp.datasets])
    return review.write_review(doc, out, trend_text)


def trends_section(exp: Experiment, args) -> str:
    """The trend checks and the training-seed spread (elf/report/trends.py), as Markdown."""
    frame = load_rows(exp, plan.review_pairs(exp), _need_evals(args), "trend checks")
    text = trends.trends_markdown(trends.check_trends(frame, exp))
    spread = trends.seed_spread_markdown(frame, exp)
    return text + (f"\n### Training-seed spread\n\n{spread}" if spread else "")


def write_manifest(exp: Experiment, ids: list[str], args, out: Path) -> Path:
    header = [f"Config: `{args.config}`  sha256 {sha256_file(args.config)}",
              f"Paper values: `{args.paper_values}`  sha256 {sha256_file(args.paper_values)}",
              f"Scale: {exp.scale}", ""]
    return manifest.write_manifest({i: exp.figures[i] for i in ids}, out,
                                   review.review_paths(out), header)


def run(args) -> None:
    exp = load_experiment(args.config)
    out = Path(args.out or exp.reports)
    try:
        if args.figure:
            render_id(exp, _selected(exp, [args.figure])[0], args, out)
            return
        ids = _selected(exp, args.only)
        if args.review:
            render_review(exp, ids, args, out)
            return
        if not args.manifest:
            for figure_id in tqdm(ids, desc="report", unit="id"):
                render_id(exp, figure_id, args, out)
            render_review(exp, ids, args, out)
        write_manifest(exp, ids, args, out)
    except MissingInputError as err:
        raise ElfError(str(err)) from None
