"""The paper's own numbers (``config/paper_values.yaml``) as rows, and the rule pairing them with ours.

``paper_points(paper_values)`` flattens the measured values into one row per (entry, metric);
``match_paper(frame, points)`` pairs our rows with them. **Matching rule** (also printed in the
replication review): a paper value matches a row when (1) the paper's model maps to the row's
``paper_run`` (see ``PAPER_RUN_OF``), (2) the sampler method (ODE/SDE) and step count are equal,
(3) the SC-CFG scale is equal, (4) γ is equal where both are SDE and the paper states γ, (5) the
input-CFG scale is equal where the paper states one, (6) our sampler uses the logit-normal grid (every
tabulated paper value does), (7) we report that metric, and (8) the split is equal where the value
states one (Table 1: test; the authors' README for their released checkpoints: validation).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import yaml

from elf import methods
from elf.report import registry
from elf.report.results import MissingInputError, _number



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

# --------------------------------------------------------------------------------------------------
README_SECTION = "authors_readme_released"
T5_FIRST_ROUND_RUN = 30  # T5 round k is the student of run R(29 + k)


# --------------------------------------------------------------------------------------------------
POINT_COLUMNS = ("point", "entry", "src", "ids", "model", "paper_run", "task", "method", "steps",
                 "gamma", "sc_cfg", "input_cfg", "split", "round", "metric", "value", "se", "origin",
                 "page")
FLOAT_TOL = 1e-9


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
    shown = registry.shown_in(src, entry)  # the figures that reuse a table's numbers (inventory §1)
    return shown if src == "README" else (src, *shown)


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


# --------------------------------------------------------------------------------------------------
# Paper values of the distilled baselines (T4), drawn as reference series in F7b/F9a.
def baseline_points(points: pd.DataFrame, src: str = "T4") -> pd.DataFrame:
    """Paper rows of ``src`` that belong to no run of ours (baselines), Gen. PPL and entropy paired."""
    rows = points[(points["src"] == src) & points["paper_run"].isna()]
    return pair_metrics(rows)

# --------------------------------------------------------------------------------------------------
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
    if methods.uses_gamma(point["method"]) and not _missing(point["gamma"]) \
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
