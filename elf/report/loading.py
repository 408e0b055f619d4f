"""Load what the report draws: aggregated scores per (run, sampler), dataset reference scores and the
paper's own numbers, as pandas DataFrames.

Reads (never writes):
- the aggregate of each (run, sampler) in its evaluation folder under ``<evals_root>`` (made by the
  ``evaluate`` rule, ``elf evaluate``; ``elf.plan.aggregate_path`` gives the path):
  ``{"provenance", "run", "sampler", "metrics": {name: {"mean", "se", "n", "per_seed"}}}``;
- ``<dataset_scores_root>/<dataset>.json``: Gen. PPL / entropy of held-out real text ("Dataset" line)
  and, under ``calibration``, of the same rows shuffled and of unigram draws (calibration lines);
- ``config/paper_values.yaml``: the paper's values (flattened by ``paper_points``);
- ``<runs_root>/<run>/config.json`` (every run's checkpoint metadata) and ``tokens.json``
  (distillation rounds, ``elf distill``): for the ids in ``RUN_METADATA_IDS`` (``load_runs_meta``);
  ``our_token_bars`` / ``paper_token_bar`` turn them and the paper's Table 8 into training-token
  bars (base training + distillation rounds).

``figure_frame(exp, id, evals_root)`` gives one row per (run, sampler) of a figure or table:
run and sampler settings, metric means (``gen_ppl``), seed SEs (``gen_ppl_se``), seed counts
(``gen_ppl_n``), per-example SEs where the aggregate carries them (metric ``rouge1_se`` →
column ``rouge1_example_se``), ``aggregate_path`` and ``aggregate_sha256``.

``match_paper(frame, points)`` pairs our rows with paper values. **Matching rule** (also printed in
the replication review): a paper value matches a row when (1) the paper's model maps to the row's
``paper_run`` (see ``PAPER_RUN_OF``), (2) the sampler method (ODE/SDE) and step count are equal,
(3) the SC-CFG scale is equal, (4) γ is equal where both are SDE and the paper states γ, (5) the
input-CFG scale is equal where the paper states one, (6) our sampler uses the logit-normal grid (every
tabulated paper value does), (7) we report that metric, and (8) the split is equal where the value
states one (Table 1: test; the authors' README for their released checkpoints: validation). A row's
``split`` is the split a conditional (run, sampler) is scored on (``scored_split``; None when
unconditional).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import yaml

from elf import plan
from elf.config import Experiment, SamplerSettings
from elf.io import read_json, sha256_file
from elf.artifacts.names import RUN_CONFIG, TOKENS_FILE
from elf.artifacts.records import run_tokens

AGGREGATE_RULE = "the `evaluate` rule (`elf evaluate`: sample, score, aggregate)"
DATASET_SCORE_RULE = "the dataset-score rule (`elf score` on held-out real text)"

SAMPLER_COLUMNS = ("method", "steps", "gamma", "grid", "sc_cfg", "input_cfg")
# Every sampler setting (the frame carries them all, so lines split on any setting that varies).
ALL_SAMPLER_COLUMNS = tuple(f.name for f in dataclasses.fields(SamplerSettings))
# Pretrained T5 encoders by name → embedding width (paper F11 panels: small/base/large).
T5_WIDTHS = {"small": 512, "base": 768, "large": 1024}
FLOAT_TOL = 1e-9


class MissingInputError(FileNotFoundError):
    """An input file the report needs does not exist; the message names it and the rule that makes it."""


# --------------------------------------------------------------------------------------------------
# Our results
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
    return plan.figure_pairs(exp, figure_id)


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


def load_rows(exp: Experiment, pairs: Iterable[tuple[str, str]], evals_root: str | Path,
              what: str = "") -> pd.DataFrame:
    """One row per (run, sampler) pair: settings, metrics and the aggregate's path and hash."""
    rows = []
    for run, sampler in pairs:
        path = plan.aggregate_path(evals_root, exp, run, sampler)
        aggregate = load_aggregate(path, f"{what + ': ' if what else ''}run {run}, sampler {sampler}")
        rows.append({**run_columns(exp, run), **sampler_columns(exp, sampler),
                     "split": scored_split(exp, run, sampler),
                     **metric_columns(aggregate.get("metrics", {})),
                     "aggregate_path": str(path), "aggregate_sha256": sha256_file(path)})
    frame = pd.DataFrame(rows)
    if frame.empty:
        frame = pd.DataFrame(columns=["run", "paper_run", "sampler", *SAMPLER_COLUMNS,
                                      "aggregate_path", "aggregate_sha256"])
    return frame


def figure_frame(exp: Experiment, figure_id: str, evals_root: str | Path) -> pd.DataFrame:
    """The rows of one figure or table (see module docstring for the columns)."""
    return load_rows(exp, figure_pairs(exp, figure_id), evals_root, f"figure {figure_id}")


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
        path = Path(root) / f"{name}.json"
        if not path.is_file():
            raise MissingInputError(f"missing dataset reference scores {path}; they are made by "
                                    f"{DATASET_SCORE_RULE}")
        data = read_json(path)
        scores[name] = {"metrics": _finite_metrics(data.get("metrics", {})),
                        "calibration": {how: _finite_metrics(values) for how, values
                                        in data.get("calibration", {}).items()},
                        "path": str(path), "sha256": sha256_file(path)}
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


def _get(row: pd.Series | dict, key: str) -> float:
    value = row.get(key, math.nan)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# --------------------------------------------------------------------------------------------------
# The paper's values
# --------------------------------------------------------------------------------------------------

# (source table, model[, task]) → the paper's run id whose numbers they are (inventory §3).
PAPER_RUN_OF = {
    ("T1", "ELF-B", "wmt14_de_en"): "R04",
    ("T1", "ELF-B", "xsum"): "R05",
    ("T9", "ELF-B"): "R01",
    ("T10", "ELF-B"): "R01",
    ("T10", "ELF-M"): "R02",
    ("T10", "ELF-L"): "R03",
    ("T4", "ELF-B+PD"): "R34",
    ("README", "ELF-B", "wmt14_de_en"): "R04",   # the authors' README: their released checkpoints
    ("README", "ELF-B", "xsum"): "R05",
}
README_SECTION = "authors_readme_released"
T5_FIRST_ROUND_RUN = 30  # T5 round k is the student of run R(29 + k)
# Which figures reuse a table's numbers (inventory §1: F4 = T10 ODE ELF-B, F6 = T10, F7 = T9, F9a = T4).
ALSO_SHOWN_IN = {"T10": ("F6",), "T9": ("F7a", "F7b", "F1"), "T4": ("F9a",), "README": ("T1",)}
POINT_COLUMNS = ("point", "entry", "src", "ids", "model", "paper_run", "task", "method", "steps",
                 "gamma", "sc_cfg", "input_cfg", "split", "round", "metric", "value", "se", "origin",
                 "page")


def load_paper_values(path: str | Path) -> dict:
    """The paper-values YAML as a mapping (parsed once per file version; do not mutate it)."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"missing paper values {path} (the copy in config/paper_values.yaml)")
    stat = path.stat()
    return _parse_yaml(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _parse_yaml(path: str, mtime_ns: int, size: int) -> dict:
    # The C loader is ~10x faster on this 40 kB file; the pure-Python one is the fallback.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(Path(path).read_text(), Loader=loader)


def _paper_run(src: str, entry: dict) -> str | None:
    if src == "T5" and entry.get("round") is not None:
        return f"R{T5_FIRST_ROUND_RUN - 1 + int(entry['round'])}"
    return PAPER_RUN_OF.get((src, entry.get("model"), entry.get("task"))) or \
        PAPER_RUN_OF.get((src, entry.get("model")))


def _point_ids(src: str, entry: dict) -> tuple[str, ...]:
    ids = ALSO_SHOWN_IN[src] if src == "README" else (src, *ALSO_SHOWN_IN.get(src, ()))
    if src == "T10" and entry.get("model") == "ELF-B" and entry.get("sampler") == "ode":
        ids += ("F4",)
    return ids


def _section_defaults(key: str, section: dict) -> dict:
    """Settings a table states once for all its entries (T1: the test split; T5: the blog's SDE
    γ 1.5, SC-CFG 2.5)."""
    if key == "table_1":
        return {"split": (section.get("elf_setting") or {}).get("split")}
    if key != "table_5":
        return {}
    sampling = section.get("sampling") or {}
    few_steps = sampling.get("steps_1_2_4_8") or {}
    return {"sampler": sampling.get("sampler"), **few_steps}


def _entries(paper_values: dict) -> Iterable[tuple[str, int, dict]]:
    for key in ("table_1", "table_4", "table_5", "table_9", "table_10"):
        section = paper_values.get(key) or {}
        defaults = _section_defaults(key, section)
        for index, entry in enumerate(section.get("entries", [])):
            yield key, index, {**defaults, **entry}
    readme = paper_values.get(README_SECTION) or {}
    setting = readme.get("conditional_setting") or {}
    for index, entry in enumerate(readme.get("conditional", [])):  # validation scores, not the paper's
        yield README_SECTION, index, {"src": "README", **setting, "task": entry.get("task"),
                                      "metric": entry.get("metric"), "value": entry.get("validation"),
                                      "origin": f"authors' README ({entry.get('repo')})"}


def paper_points(paper_values: dict) -> pd.DataFrame:
    """The paper's measured values as one row per (entry, metric) (columns ``POINT_COLUMNS``).

    Long entries (``metric: …, value: …``) give one row; wide entries (``gen_ppl: …, entropy: …``)
    give one row per metric. ``entry`` pairs the rows of one setting (e.g. its Gen. PPL and entropy).
    """
    rows = []
    for key, index, entry in _entries(paper_values):
        src = str(entry.get("src", key))
        if "metric" in entry:
            measured = [(entry["metric"], entry.get("value"), entry.get("se"))]
        else:
            measured = [(m, entry[m], None) for m in ("gen_ppl", "entropy") if m in entry]
        entry_key = ":".join(str(entry.get(k)) for k in
                             ("src", "model", "task", "sampler", "steps", "gamma", "sc_cfg",
                              "input_cfg", "split", "round"))
        for metric, value, se in measured:
            if value is None:
                continue  # the paper prints '-' here
            rows.append({
                "point": f"{key}[{index}].{metric}", "entry": entry_key, "src": src,
                "ids": _point_ids(src, entry), "model": entry.get("model"),
                "paper_run": _paper_run(src, entry), "task": entry.get("task"),
                "method": entry.get("sampler"), "steps": entry.get("steps"),
                "gamma": entry.get("gamma"), "sc_cfg": entry.get("sc_cfg"),
                "input_cfg": entry.get("input_cfg"), "split": entry.get("split"),
                "round": entry.get("round"), "metric": metric, "value": float(value), "se": _number(se),
                "origin": entry.get("origin"), "page": entry.get("page_v2"),
            })
    return pd.DataFrame(rows, columns=list(POINT_COLUMNS))


# Paper values of the distilled baselines (T4), drawn as reference series in F7b/F9a.
def baseline_points(points: pd.DataFrame, src: str = "T4") -> pd.DataFrame:
    """Paper rows of ``src`` that belong to no run of ours (baselines), Gen. PPL and entropy paired."""
    rows = points[(points["src"] == src) & points["paper_run"].isna()]
    return pair_metrics(rows)


def pair_metrics(points: pd.DataFrame) -> pd.DataFrame:
    """Paper rows pivoted to one row per entry with ``gen_ppl``/``entropy``/… columns (and ``*_se``)."""
    if points.empty:
        return pd.DataFrame(columns=["entry", "model", "steps"])
    keys = ["entry", "model", "paper_run", "task", "method", "steps", "gamma", "sc_cfg",
            "input_cfg", "round"]
    out = []
    for entry, group in points.groupby("entry", sort=False):
        first = group.iloc[0]
        record = {k: first[k] for k in keys}
        for _, point in group.iterrows():
            record[point["metric"]] = point["value"]
            record[f"{point['metric']}_se"] = point["se"]
        out.append(record)
    return pd.DataFrame(out)


def _same(ours: Any, theirs: Any) -> bool:
    try:
        return abs(float(ours) - float(theirs)) <= FLOAT_TOL
    except (TypeError, ValueError):
        return False


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def point_matches_row(point: pd.Series | dict, row: pd.Series | dict) -> bool:
    """The matching rule of the module docstring, for one paper value and one of our rows."""
    if _missing(point["paper_run"]) or point["paper_run"] != row.get("paper_run"):
        return False
    if point["method"] != row.get("method") or not _same(row.get("steps"), point["steps"]):
        return False
    if not _same(row.get("sc_cfg"), point["sc_cfg"]):
        return False
    if point["method"] == "sde" and not _missing(point["gamma"]) \
            and not _same(row.get("gamma"), point["gamma"]):
        return False
    if not _missing(point["input_cfg"]) and not _same(row.get("input_cfg"), point["input_cfg"]):
        return False
    if row.get("grid") != "logit_normal":
        return False
    if not _missing(point["split"]) and row.get("split") != point["split"]:
        return False
    return point["metric"] in row and not _missing(row.get(point["metric"]))


def match_paper(frame: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Every (paper value, our row) pair that matches: the point's columns plus ``row_index``."""
    matches = []
    if frame.empty or points.empty:
        return pd.DataFrame(columns=[*POINT_COLUMNS, "row_index"])
    candidates = points[points["paper_run"].notna()].to_dict("records")
    for row_index, row in zip(frame.index, frame.to_dict("records")):
        for point in candidates:
            if point_matches_row(point, row):
                matches.append({**point, "row_index": row_index})
    return pd.DataFrame(matches, columns=[*POINT_COLUMNS, "row_index"])


# --------------------------------------------------------------------------------------------------
# Run metadata: what the runs were (config.json) and how many tokens they saw (tokens.json)
# --------------------------------------------------------------------------------------------------

# Ids whose renderer reads the runs' checkpoint metadata (``R/runs/<run>/config.json``, and
# ``tokens.json`` of distillation rounds) besides or instead of aggregates. The workflow declares
# ``R/runs/<run>/ema.safetensors`` (the rule output the metadata sits beside) as their input.
RUN_METADATA_IDS = ("T6", "T7", "T8", "F7c", "F9b")
RUN_RULE = "the run's rule (`train`, `distill` or `released`)"
BILLION = 1e9


def load_run_meta(runs_root: str | Path, run: str) -> dict:
    """One run's metadata: ``{"run", "config", "config_path", "config_sha256", "tokens",
    "tokens_path", "tokens_sha256"}`` (``tokens*`` are None for runs without tokens.json)."""
    run_dir = Path(runs_root) / run
    config_path = run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise MissingInputError(
            f"missing run metadata {config_path}; it is written with the checkpoint by "
            f"{RUN_RULE}: run `snakemake {run_dir}/ema.safetensors`")
    tokens_path = run_dir / TOKENS_FILE
    has_tokens = tokens_path.is_file()
    return {"run": run, "config": read_json(config_path), "config_path": str(config_path),
            "config_sha256": sha256_file(config_path),
            "tokens": read_json(tokens_path) if has_tokens else None,
            "tokens_path": str(tokens_path) if has_tokens else None,
            "tokens_sha256": sha256_file(tokens_path) if has_tokens else None}


def load_runs_meta(runs_root: str | Path, runs: Iterable[str]) -> dict[str, dict]:
    """``load_run_meta`` of each run, in order."""
    return {run: load_run_meta(runs_root, run) for run in dict.fromkeys(runs)}


def metadata_entries(runs_meta: dict[str, dict]) -> list[dict]:
    """The metadata files behind a figure or table (path, sha256, run) for its provenance."""
    entries = []
    for run, meta in runs_meta.items():
        entries.append({"path": meta["config_path"], "sha256": meta["config_sha256"], "run": run})
        if meta.get("tokens_path"):
            entries.append({"path": meta["tokens_path"], "sha256": meta["tokens_sha256"],
                            "run": run})
    return entries


def trained_tokens(config: dict) -> int | None:
    """Tokens a run trained on here (steps × batch × L, ``elf.artifacts.records.run_tokens``); None for
    a released checkpoint (trained elsewhere) or when the budget is unknown."""
    if (config.get("run") or {}).get("kind") == "released":
        return None
    return run_tokens(config)


def run_epochs(config: dict) -> float | None:
    """Passes over the training data: trained tokens ÷ valid tokens of the train store (the count
    its normalisation statistics were taken over); None when either is unknown."""
    tokens = trained_tokens(config)
    count = (config.get("normalization_stats") or {}).get("count")
    if tokens is None or not count:
        return None
    return tokens / float(count)


@dataclasses.dataclass
class TokenBar:
    """One training-token bar: base training plus the distillation rounds on top (tokens)."""
    label: str
    source: str                       # "ours" or "paper"
    base: float | None                # base-training tokens (a distilled model: its teacher's)
    rounds: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # (round, tokens)
    run: str | None = None
    path: str | None = None           # the metadata file the numbers come from (ours)

    @property
    def distill(self) -> float:
        return float(sum(tokens for _, tokens in self.rounds))

    @property
    def total(self) -> float | None:
        return None if self.base is None else self.base + self.distill

    def ratio(self, reference: float | None) -> float | None:
        """Total over a reference (the paper's "× ELF" column)."""
        return None if self.total is None or not reference else self.total / reference


def _final_rounds(runs_meta: dict[str, dict]) -> set[str]:
    """Distillation runs that are no earlier round of another listed run's chain."""
    earlier = set()
    for meta in runs_meta.values():
        rounds = (meta.get("tokens") or {}).get("rounds", [])
        earlier |= {r["run"] for r in rounds[:-1]}
    return {run for run, meta in runs_meta.items() if meta.get("tokens") and run not in earlier}


def our_token_bars(runs_meta: dict[str, dict], labels: dict[str, str] | None = None
                   ) -> list[TokenBar]:
    """A bar per trained run (its own tokens) and per final distillation round (its teacher's
    tokens + every round of its chain, from its ``tokens.json``), in ``runs_meta`` order."""
    finals = _final_rounds(runs_meta)
    bars = []
    for run, meta in runs_meta.items():
        label = (labels or {}).get(run, run)
        tokens = meta.get("tokens")
        if tokens is None:
            bars.append(TokenBar(label, "ours", trained_tokens(meta["config"]), run=run,
                                 path=meta["config_path"]))
        elif run in finals:
            rounds = [(r["run"], float(r["tokens_seen"])) for r in tokens.get("rounds", [])]
            base = tokens.get("teacher_tokens_seen")
            bars.append(TokenBar(label, "ours", None if base is None else float(base), rounds,
                                 run=run, path=meta["tokens_path"]))
    return bars


def paper_tokens(paper_values: dict) -> dict[str, float]:
    """The paper's Table 8 totals per model, in tokens (its values are in billions)."""
    entries = (paper_values.get("table_8") or {}).get("entries", [])
    return {e["model"]: float(round(float(e["value"]) * BILLION)) for e in entries}


def paper_token_bar(paper_values: dict, label: str, base_model: str,
                    total_model: str | None = None, total: float | None = None) -> TokenBar:
    """A paper bar: ``base_model``'s Table 8 tokens, topped up to ``total_model``'s (or ``total``)
    as "extra distillation"."""
    tokens = paper_tokens(paper_values)
    base = tokens.get(base_model)
    top = tokens.get(total_model) if total_model else total
    rounds = [("extra distillation", top - base)] if base is not None and top is not None \
        and top > base else []
    return TokenBar(label, "paper", base, rounds)


def paper_pd_tokens(paper_values: dict) -> float | None:
    """ELF+PD's total training tokens as the paper states them (v2 Fig. 9b: 90B), in tokens."""
    extra = (paper_values.get("table_8") or {}).get("not_in_table") or {}
    value = extra.get("ELF-B+PD_train_tokens_B")
    return None if value is None else float(round(float(value) * BILLION))
