"""The cells of the report's tables and how a table is written: ``Table`` (Markdown, LaTeX, CSV),
``mean ± SE`` cells of ours (SE over evaluation seeds when there are two or more, else the
per-example SE where the aggregate has one) and of the paper (its SE as printed), settings cells and
the comparison of a setting with the paper's (``same_setting``). The tables are
``elf.report.tables`` (results) and ``elf.report.config_tables`` (configuration).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from elf import methods
from elf.config import Experiment
from elf.io import atomic_path
from elf.report.paper import match_paper
from elf.report.results import dataset_layout, reported_se
from elf.report.runs import BILLION

DEGENERATE_ENTROPY = 5.0  # paper T5 stars cells with entropy < 5
DASH = "–"


@dataclass
class TableInputs:
    """What a table function reads."""
    figure_id: str
    title: str
    frame: pd.DataFrame
    points: pd.DataFrame
    exp: Experiment | None = None
    paper_values: dict = field(default_factory=dict)
    runs_meta: dict[str, dict] = field(default_factory=dict)  # ``loading.load_runs_meta``


@dataclass
class Table:
    """A rendered table: header, rows of display strings, and notes printed under it."""
    table_id: str
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        def line(cells: list[str]) -> str:
            return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
        out = [f"### {self.table_id}: {self.title}", "", line(self.header),
               "|" + "|".join("---" for _ in self.header) + "|"]
        out += [line(row) for row in self.rows]
        out += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(out).rstrip() + "\n"

    def to_latex(self) -> str:
        spec = "l" * len(self.header)
        out = ["\\begin{table}[t]", "\\centering", "\\small",
               f"\\caption{{{latex_escape(self.title)}}}",
               f"\\label{{tab:{self.table_id}}}", f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
               " & ".join(latex_escape(h) for h in self.header) + " \\\\", "\\midrule"]
        out += [" & ".join(latex_escape(c) for c in row) + " \\\\" for row in self.rows]
        out += ["\\bottomrule", "\\end{tabular}"]
        out += [f"\\par\\footnotesize {latex_escape(note)}" for note in self.notes]
        out += ["\\end{table}"]
        return "\n".join(out) + "\n"

    def write_csv(self, path: Path) -> None:
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(self.header)
            writer.writerows(self.rows)


LATEX_SPECIAL = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#",
                 "_": "\\_", "{": "\\{", "}": "\\}", "~": "\\textasciitilde{}",
                 "^": "\\textasciicircum{}", "±": "$\\pm$", "γ": "$\\gamma$", "ε": "$\\varepsilon$",
                 "×": "$\\times$", DASH: "--", "→": "$\\to$", "✓": "$\\checkmark$",
                 "≈": "$\\approx$"}


def latex_escape(text: Any) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))


# --------------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------------

def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def fmt_se(se: float, digits: int = 2) -> str:
    """SE with ``digits`` decimals, or two significant figures when that would print 0."""
    text = f"{se:.{digits}f}"
    return text if se == 0 or float(text) != 0 else f"{se:.2g}"


def fmt_pm(mean: Any, se: Any = math.nan, digits: int = 2) -> str:
    """``mean ± se`` (``mean`` alone when there is no SE; a dash when there is no mean)."""
    if not _finite(mean):
        return DASH
    text = f"{float(mean):.{digits}f}"
    if _finite(se):
        text += f" ± {fmt_se(float(se), digits)}"
    return text


def paper_se(se: float) -> str:
    """A paper SE with two decimals, or as many (up to four) as it needs (0.10, 0.085, 0.002)."""
    for digits in (2, 3, 4):
        if abs(round(se, digits) - se) < 1e-12:
            return f"{se:.{digits}f}"
    return f"{se:.2g}"


def paper_pm(value: Any, se: Any = math.nan, digits: int = 2) -> str:
    """A paper value ``value ± se`` with the SE as the paper prints it."""
    if not _finite(value):
        return DASH
    return f"{float(value):.{digits}f}" + (f" ± {paper_se(float(se))}" if _finite(se) else "")


def ours(row: pd.Series | dict, metric: str, prefer: str = "seeds") -> str:
    """One metric of one of our rows, ``mean ± SE``."""
    return fmt_pm(row.get(metric), reported_se(row, metric, prefer))


def ppl_entropy(row: pd.Series | dict, star: bool = False) -> str:
    """``Gen. PPL / entropy`` cell (each ``mean ± SE``); ``*`` marks entropy < 5 when ``star``."""
    cell = f"{ours(row, 'gen_ppl')} / {ours(row, 'entropy')}"
    return cell + ("*" if star and _degenerate(row.get("entropy")) else "")


def paper_ppl_entropy(values: dict, star: bool = False) -> str:
    cell = f"{paper_pm(values.get('gen_ppl'), values.get('gen_ppl_se'))} / " \
           f"{paper_pm(values.get('entropy'), values.get('entropy_se'))}"
    return cell + ("*" if star and _degenerate(values.get("entropy")) else "")


def _degenerate(entropy: Any) -> bool:
    return _finite(entropy) and float(entropy) < DEGENERATE_ENTROPY


def sampler_text(row: pd.Series | dict) -> str:
    steps = int(row["steps"])
    parts = [f"{row['sampler']}: {methods.label(row['method'])} {steps} step{'s' * (steps != 1)}"]
    if methods.uses_gamma(row["method"]):
        parts.append(f"γ={row['gamma']:g}")
    parts.append(f"SC-CFG {row['sc_cfg']:g}")
    if row.get("task") in ("translation", "summarization"):
        parts.append(f"input CFG {row['input_cfg']:g}")
    if row.get("grid") == "uniform":
        parts.append("uniform grid")
    return ", ".join(parts)


def matched_values(frame: pd.DataFrame, points: pd.DataFrame, src: str | None = None
                   ) -> dict[Any, dict]:
    """For each row index of ``frame``: the first matching paper entry's metrics (from ``src``)."""
    if src is not None and not points.empty:
        points = points[points["src"] == src]
    matches = match_paper(frame, points)
    out: dict[Any, dict] = {}
    for row_index, per_row in matches.groupby("row_index", sort=False):
        entry = per_row["entry"].iloc[0]
        group = per_row[per_row["entry"] == entry]
        values = {"entry": entry}
        for _, point in group.iterrows():
            values[point["metric"]] = point["value"]
            values[f"{point['metric']}_se"] = point["se"]
        out[row_index] = values
    return out


def provenance_note(frame: pd.DataFrame) -> list[str]:
    if frame.empty:
        return ["No aggregates: the configuration lists no (run, sampler) pairs for this table."]
    return ["Ours: mean ± SE over evaluation seeds (per-example SE when one seed); "
            "aggregates: " + ", ".join(dict.fromkeys(frame["aggregate_path"])) + "."]


def layout_notes(exp: Experiment | None, frame: pd.DataFrame) -> list[str]:
    """The sequence layout and origin of each dataset behind a table's rows (spec §2)."""
    if exp is None or frame.empty or "dataset" not in frame:
        return []
    names = [d for d in dict.fromkeys(frame["dataset"]) if d in exp.datasets]
    return ["Data: " + "; ".join(dataset_layout(exp, name) for name in names) + "."] if names else []


def _text(value: Any, fmt: str = "{}") -> str:
    return DASH if value is None or (isinstance(value, float) and math.isnan(value)) \
        else fmt.format(value)


def count_text(n: Any) -> str:
    """A parameter count as ``104.6M (104,594,304)``."""
    return f"{n / 1e6:.1f}M ({int(n):,})" if _finite(n) else DASH


def paper_count(text: Any) -> float:
    """``"105M"`` → 105e6 (NaN when unreadable)."""
    units = {"K": 1e3, "M": 1e6, "B": 1e9}
    text = str(text).strip()
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        return math.nan


def tokens_b(tokens: Any) -> str:
    """Tokens in billions as the paper prints them (three significant figures for tiny runs)."""
    if not _finite(tokens):
        return DASH
    value = float(tokens) / BILLION
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def setting_cell(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, (list, tuple)):
        return " / ".join(setting_cell(v) for v in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10000:
        return f"{value:,}"
    return str(value)


def same_setting(paper: Any, ours: Any, tolerance: float | None) -> str:
    """``yes``/``no`` for comparable settings, a dash otherwise. Numbers: equal within ``tolerance``
    (relative when 0 < tolerance < 1, else absolute; ``"105M"`` reads as 105e6); text: equal up to
    case and -/_."""
    if tolerance is None or paper is None or ours is None:
        return DASH
    if isinstance(paper, (list, tuple)) or isinstance(ours, (list, tuple)):
        if not isinstance(paper, (list, tuple)) or not isinstance(ours, (list, tuple)) \
                or len(paper) != len(ours):
            return "no"
        return "yes" if all(same_setting(p, o, tolerance) == "yes"
                            for p, o in zip(paper, ours)) else "no"
    if isinstance(paper, str) and not _finite(paper_count(paper)):
        return "yes" if paper.replace("-", "_").lower() == str(ours).replace("-", "_").lower() \
            else "no"
    theirs = paper_count(paper) if isinstance(paper, str) else float(paper)
    if not _finite(theirs) or not _finite(ours):
        return "no"
    bound = tolerance * abs(theirs) if 0 < tolerance < 1 else tolerance
    return "yes" if abs(float(ours) - theirs) <= bound + 1e-12 * max(1.0, abs(theirs)) else "no"


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------

def write_table(table: Table, paths: list[Path]) -> list[Path]:
    """Write a built table as CSV, Markdown and LaTeX (``paths`` in that order), atomically."""
    csv_path, md_path, tex_path = paths
    with atomic_path(csv_path) as tmp:
        table.write_csv(tmp)
    with atomic_path(md_path) as tmp:
        tmp.write_text(table.to_markdown())
    with atomic_path(tex_path) as tmp:
        tmp.write_text(table.to_latex())
    return paths
