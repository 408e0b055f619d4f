r"""``elf report``: render the paper's figures and tables from aggregated scores, the replication
review and the manifest ``<out>/all``.

Reads the evaluation folders it is given (``--evals DIR ...``, or one per line of ``--evals-from
FILE``: the rule's inputs; ``elf evaluate`` made each, with its (run, sampler)'s aggregates and,
for a figure that shows samples, the first seed's samples and per-sample scores), ``<dataset-scores-root>/<dataset>.json`` (real-text reference scores,
for the "Dataset" lines), ``<runs-root>/<run>/config.json`` and ``tokens.json`` (run metadata, for
the configuration tables, the token bars and the review's configuration checks),
``<trajectories-root>/<run>/<sampler>.json`` (``elf trajectory``, for a figure that shows one), the
paper's values (``config/paper_values.yaml``) and the experiment: ``--config`` (a config file, or
the workflow's ``experiment.json``) or, for one figure, ``--settings`` (the slice of the config it
uses, ``elf.plan.figure_config``: the workflow passes it, so a figure reruns only when its slice
changes). What each id reads is its registry entry's (``elf/report/registry.py``). Writes, atomically,
under ``--out`` (default: the config's ``reports``):
  figures/<id>.png, figures/<id>.csv (plotted numbers), figures/<id>.json (provenance)
  tables/<id>.csv, tables/<id>.md, tables/<id>.tex, tables/<id>.json (provenance)
  replication.md, replication.html, trends.md (its trend checks alone), and last ``all`` (the manifest).

Modes (one Snakemake rule per figure/table, one for the review, one for the manifest):
  elf report --config C --evals E/*/* --dataset-scores-root D --runs-root RUNS \
      --paper-values P --out reports
      everything (``--only ID ...`` limits it to some ids);
  ... --figure F4      only that figure's (or table's) files (provenance sidecar: the aggregates,
                       and the run metadata or the samples shown, with sha256);
  ... --review         only replication.md/.html (from the aggregates);
  ... --manifest       only ``all``, from the already-rendered files.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from tqdm import tqdm

from elf.artifacts.layout import TRENDS_FILE, review_paths
from elf.errors import ElfError
from elf.config import ConfigError, Experiment
from elf.validate import parse_experiment
from elf.artifacts import file_sha256


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="figures, tables, replication review and manifest",
        description=__doc__)
    experiment = parser.add_mutually_exclusive_group(required=True)
    experiment.add_argument("--config", help="experiment YAML or JSON (config/config.yaml)")
    experiment.add_argument("--settings", help="with --figure: the figure's slice of the config, JSON")
    parser.add_argument("--evals", nargs="*", default=[], metavar="DIR",
                        help="evaluation folders <evals>/<run>/<group>/ (aggregates; the samples and "
                        "scores a figure shows): every folder an id reads")
    parser.add_argument("--evals-from", metavar="FILE",
                        help="a file naming more evaluation folders, one per line (the review's, "
                        "too many for one command line)")
    parser.add_argument("--dataset-scores-root", help="folder of <dataset>.json reference scores "
                        "(Dataset lines; omitted: no Dataset line)")
    parser.add_argument("--trajectories-root", help="folder of <run>/<sampler>.json trajectories")
    parser.add_argument("--runs-root", help="folder of <run>/config.json (and tokens.json) run "
                        "metadata, for the configuration tables and token bars")
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


def experiment_of(settings: str) -> Experiment:
    """The Experiment of a figure's config slice (``--settings``)."""
    try:
        return parse_experiment(json.loads(settings))
    except (json.JSONDecodeError, ConfigError) as err:
        raise ElfError(f"--settings: {err}") from None


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


def write_manifest(exp: Experiment, ids: list[str], config: str, paper_values: str, out: Path) -> Path:
    from elf.report import manifest

    header = [f"Config: `{config}`  sha256 {file_sha256(config)}",
              f"Paper values: `{paper_values}`  sha256 {file_sha256(paper_values)}",
              f"Scale: {exp.scale}", ""]
    return manifest.write_manifest({i: exp.figures[i] for i in ids}, out,
                                   [*review_paths(out), out / TRENDS_FILE], header)


def evals_listed(path: str | None) -> tuple[str, ...]:
    """The folders ``--evals-from`` names, one per line (blank lines skipped)."""
    if not path:
        return ()
    try:
        return tuple(line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()
                     if line.strip())
    except (OSError, UnicodeDecodeError) as err:
        raise ElfError(f"--evals-from {path}: cannot read ({err})") from err


def run(args) -> None:
    from elf.report.render import Sources, render_id, render_review
    from elf.report.results import MissingInputError

    if args.settings and not args.figure:
        raise ElfError("--settings (a figure's slice of the config) goes with --figure; the review, "
                       "the manifest and a whole report read --config")
    exp = experiment_of(args.settings) if args.settings else load_experiment(args.config)
    out = Path(args.out or exp.reports)
    sources = Sources(tuple(args.evals) + evals_listed(args.evals_from), args.dataset_scores_root, args.runs_root, args.trajectories_root,
                      args.paper_values)
    try:
        if args.figure:
            render_id(exp, _selected(exp, [args.figure])[0], sources, out, pdf=args.pdf)
            return
        ids = _selected(exp, args.only)
        if args.review:
            render_review(exp, ids, sources, out, load_unstated(args.unstated_settings))
            return
        if not args.manifest:
            for figure_id in tqdm(ids, desc="report", unit="id"):
                render_id(exp, figure_id, sources, out, pdf=args.pdf)
            render_review(exp, ids, sources, out, load_unstated(args.unstated_settings))
        write_manifest(exp, ids, args.config, args.paper_values, out)
    except MissingInputError as err:
        raise ElfError(str(err)) from None
