"""The paper's result and configuration tables rebuilt from our aggregates, beside the paper's values.

Each registry function ``TABLES[id](inputs) -> Table`` lays out one table as the paper does, our cells
as ``mean ± SE`` (SE over evaluation seeds when there are two or more, else the per-example SE where
the aggregate has one; T1 prefers per-example SEs as the paper's XSum column does).
``render_table(id, inputs, out_dir)`` writes ``<out_dir>/<id>.csv``, ``.md`` and ``.tex`` atomically;
an id with no registry entry gets ``generic_table`` (every row with its metrics and matched paper
values), so a new id in the config never crashes the report.

Tables (inventory ``figures_and_tables.md`` §2): T1 BLEU/ROUGE with the paper's baselines, T3 the
distillation curriculum from our run settings, T4 ELF+PD against the paper's distilled baselines,
T5 distillation round × steps, T9 mean ± SE over seeds, T10 the scaling grid.
Run through the stage: ``elf report --figure T9 ...`` (see ``elf/stages/report.py``).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from elf.config import Experiment
from elf.io import atomic_path
from elf.report.loading import match_paper, pair_metrics, reported_se

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
                 "×": "$\\times$", DASH: "--", "→": "$\\to$"}


def latex_escape(text: Any) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))


# --------------------------------------------------------------------------------------------------
# Cell formatting
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
    parts = [f"{row['sampler']}: {str(row['method']).upper()} {steps} step{'s' * (steps != 1)}"]
    if row["method"] == "sde":
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


# --------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------

T1_COLUMNS = [("translation", "bleu", "De-En BLEU"), ("summarization", "rouge1", "XSum ROUGE-1"),
              ("summarization", "rouge2", "XSum ROUGE-2"), ("summarization", "rougeL", "XSum ROUGE-L")]


def table_T1(inputs: TableInputs) -> Table:
    """BLEU on De-En and ROUGE-1/2/L on XSum: the paper's rows (baselines, ELF-B) and ours."""
    points = inputs.points[inputs.points["src"] == "T1"] if not inputs.points.empty \
        else inputs.points
    header = ["Model", "Params", *[c[2] for c in T1_COLUMNS], "Source"]
    rows = []
    for model, group in points.groupby("model", sort=False):
        cells = {p["metric"]: paper_pm(p["value"], p["se"]) for _, p in group.iterrows()}
        rows.append([model, _t1_params(inputs.paper_values, model),
                     *[cells.get(m, DASH) for _, m, _ in T1_COLUMNS],
                     "paper" + _origin_marks(group["origin"])])
    notes = ["Paper: T1 (p. 9); XSum SE across evaluation examples; † = value from earlier work, "
             "‡ = reproduced by the paper's authors."]
    frame = inputs.frame
    for sampler, group in frame.groupby("sampler", sort=False) if not frame.empty else []:
        cells, runs = {}, []
        for _, row in group.iterrows():
            for task, metric, _ in T1_COLUMNS:
                if metric not in cells and metric in row and _finite(row.get(metric)):
                    cells[metric] = ours(row, metric, prefer="examples")
                    runs.append(row["run"])
        rows.append([f"ELF (ours) [{', '.join(dict.fromkeys(runs)) or DASH}]", DASH,
                     *[cells.get(m, DASH) for _, m, _ in T1_COLUMNS],
                     f"ours ({sampler_text(group.iloc[0])})"])
    return Table("T1", inputs.title, header, rows, notes + provenance_note(frame))


def _origin_marks(origins: pd.Series) -> str:
    texts = [str(o) for o in origins.dropna()]
    marks = ("†" if any(t.startswith("literature") for t in texts) else "") + \
            ("‡" if any(t.startswith("reproduced") for t in texts) else "")
    return f" {marks}" if marks else ""


def _t1_params(paper_values: dict, model: str) -> str:
    entries = (paper_values.get("table_1") or {}).get("entries", [])
    return str(next((e.get("params") for e in entries if e.get("model") == model), "") or "")


def table_T3(inputs: TableInputs) -> Table:
    """Progressive-distillation curriculum from our run settings, beside the paper's Table 3."""
    paper = (inputs.paper_values.get("table_3") or {}).get("entries", [])
    header = ["Round", "Run", "Paper run", "Student steps", "Teacher sub-steps", "Product",
              "Teacher", "Init from", "Paper student steps", "Paper teacher sub-steps"]
    rows = []
    runs = inputs.exp.figures[inputs.figure_id].runs if inputs.exp else ()
    for position, name in enumerate(runs):
        run = inputs.exp.run(name)
        distill = run.distill
        ref = paper[position] if position < len(paper) else {}
        product = distill.student_steps * distill.teacher_substeps if distill else None
        rows.append([str(position + 1), name, run.paper_run or DASH,
                     *(str(v) if v is not None else DASH for v in (
                         distill.student_steps if distill else None,
                         distill.teacher_substeps if distill else None, product,
                         run.teacher, run.init_from,
                         ref.get("student_steps"), ref.get("teacher_substeps_per_student_step")))])
    notes = ["Round = position of the run in the table's `runs` list; paper: T3 (p. 20), "
             "student steps × teacher sub-steps = 64 in every round."]
    return Table("T3", inputs.title, header, rows, notes)


def table_T4(inputs: TableInputs) -> Table:
    """Gen. PPL / entropy at 1–32 steps: the paper's distilled baselines and ELF+PD, and ours."""
    paper = pair_metrics(inputs.points[inputs.points["src"] == "T4"]) \
        if not inputs.points.empty else pd.DataFrame()
    models = list(dict.fromkeys(paper["model"])) if not paper.empty else []
    our_columns, notes = _columns_by_run(inputs.frame)
    steps = sorted({int(s) for s in paper.get("steps", pd.Series(dtype=float)).dropna()} |
                   {int(s) for s in inputs.frame.get("steps", pd.Series(dtype=float)).dropna()})
    header = ["Steps", *[f"{m} (paper)" for m in models], *our_columns]
    rows = []
    for n in steps:
        cells = [str(n)]
        for model in models:
            match = paper[(paper["model"] == model) & (paper["steps"] == n)]
            cells.append(paper_ppl_entropy(match.iloc[0].to_dict()) if not match.empty else DASH)
        for column in our_columns:
            row = our_columns[column].get(n)
            cells.append(ppl_entropy(row) if row is not None else DASH)
        rows.append(cells)
    notes = ["Cells: Gen. PPL / entropy. Paper: T4 (p. 20); baselines ~170M, sampler not stated."] \
        + notes + provenance_note(inputs.frame)
    return Table("T4", inputs.title, header, rows, notes)


def _columns_by_run(frame: pd.DataFrame) -> tuple[dict[str, dict[int, pd.Series]], list[str]]:
    """Our rows per run as ``{column name: {steps: row}}``; a second row with the same steps for the
    same run opens another column. Also a note naming each column's samplers."""
    columns: dict[str, dict[int, pd.Series]] = {}
    notes = []
    for run, group in frame.groupby("run", sort=False) if not frame.empty else []:
        for _, row in group.iterrows():
            k = 0
            while (name := f"{run} (ours)" + (f" #{k + 1}" if k else "")) in columns \
                    and int(row["steps"]) in columns[name]:
                k += 1
            columns.setdefault(name, {})[int(row["steps"])] = row
    for name, by_steps in columns.items():
        notes.append(f"{name}: " + "; ".join(sampler_text(r) for r in by_steps.values()))
    return columns, notes


def _round_of(row_run_position: int, paper_run: Any) -> int:
    """Distillation round: from the paper run id (R30 → 1 … R34 → 5) or the run's list position."""
    if isinstance(paper_run, str) and paper_run.startswith("R") and paper_run[1:].isdigit() \
            and 30 <= int(paper_run[1:]) <= 34:
        return int(paper_run[1:]) - 29
    return row_run_position + 1


def table_T5(inputs: TableInputs) -> Table:
    """Curriculum ablation: each round's student at each step count, ours and the paper's."""
    frame = inputs.frame
    paper = pair_metrics(inputs.points[inputs.points["src"] == "T5"]) \
        if not inputs.points.empty else pd.DataFrame()
    steps = sorted({int(s) for s in paper.get("steps", pd.Series(dtype=float)).dropna()} |
                   {int(s) for s in frame.get("steps", pd.Series(dtype=float)).dropna()})
    header = ["Round", "Run", "Source", *[f"{n} step{'s' if n > 1 else ''}" for n in steps]]
    rows = []
    runs = list(dict.fromkeys(frame["run"])) if not frame.empty else []
    for position, run in enumerate(runs):
        group = frame[frame["run"] == run]
        round_ = _round_of(position, group["paper_run"].iloc[0])
        by_steps = {int(r["steps"]): r for _, r in group.iterrows()}
        rows.append([f"r{round_}", run, "ours",
                     *[ppl_entropy(by_steps[n], star=True) if n in by_steps else DASH
                       for n in steps]])
        ref = paper[paper["round"] == round_] if not paper.empty else paper
        if not ref.empty:
            by_steps = {int(r["steps"]): r.to_dict() for _, r in ref.iterrows()}
            rows.append([f"r{round_}", DASH, "paper",
                         *[paper_ppl_entropy(by_steps[n], star=True) if n in by_steps else DASH
                           for n in steps]])
    notes = ["Cells: Gen. PPL / entropy; * = degenerate (entropy < 5). Paper: T5 (p. 21); its "
             "values come from the authors' blog (only r2 and r5 at 1 step confirmed in v2)."]
    return Table("T5", inputs.title, header, rows, notes + provenance_note(frame))


def table_T9(inputs: TableInputs) -> Table:
    """System-level ELF-B at 8/16/32 SDE steps: mean ± SE over evaluation seeds, and the paper's."""
    frame = inputs.frame.sort_values("steps") if not inputs.frame.empty else inputs.frame
    matched = matched_values(frame, inputs.points, "T9")
    header = ["Run", "Steps", "γ", "SC-CFG", "Seeds", "Gen. PPL (ours)", "Entropy (ours)",
              "Gen. PPL (paper)", "Entropy (paper)"]
    rows = []
    for index, row in frame.iterrows():
        paper = matched.get(index, {})
        n = row.get("gen_ppl_n")
        rows.append([row["run"], str(int(row["steps"])), f"{row['gamma']:g}", f"{row['sc_cfg']:g}",
                     str(int(n)) if _finite(n) else DASH, ours(row, "gen_ppl"),
                     ours(row, "entropy"), paper_pm(paper.get("gen_ppl"), paper.get("gen_ppl_se")),
                     paper_pm(paper.get("entropy"), paper.get("entropy_se"))])
    matched_entries = {v["entry"] for v in matched.values()}
    paper = pair_metrics(inputs.points[inputs.points["src"] == "T9"]) \
        if not inputs.points.empty else pd.DataFrame()
    for _, entry in paper.iterrows():
        if entry["entry"] not in matched_entries:
            rows.append([f"{entry['paper_run']} (paper only)", str(int(entry["steps"])),
                         f"{entry['gamma']:g}", f"{entry['sc_cfg']:g}", "6", DASH, DASH,
                         paper_pm(entry.get("gen_ppl"), entry.get("gen_ppl_se")),
                         paper_pm(entry.get("entropy"), entry.get("entropy_se"))])
    notes = ["Paper: T9 (p. 31), mean ± SE over evaluation seeds 0–5."]
    return Table("T9", inputs.title, header, rows, notes + provenance_note(frame))


def table_T10(inputs: TableInputs) -> Table:
    """Scaling grid: rows sampler × SC-CFG, a Gen. PPL and an entropy column per run; each cell
    ``ours (paper)``."""
    frame = inputs.frame
    matched = matched_values(frame, inputs.points, "T10")
    runs = list(dict.fromkeys(frame["run"])) if not frame.empty else []
    labels = {run: f"{frame[frame['run'] == run]['model_size'].iloc[0]} [{run}]" for run in runs}
    header = ["Sampler", "SC-CFG"] + [f"{labels[r]} {m}" for r in runs
                                      for m in ("Gen. PPL", "Entropy")]
    keys = list(dict.fromkeys((r["method"], int(r["steps"]), float(r["gamma"]) if
                               r["method"] == "sde" else 0.0, float(r["sc_cfg"]))
                              for _, r in frame.iterrows())) if not frame.empty else []
    keys.sort(key=lambda k: (k[0] != "sde", k[1], k[2], k[3]))  # the paper lists SDE first
    rows = []
    for method, steps, gamma, sc_cfg in keys:
        name = f"{method.upper()} {steps}" + (f" γ={gamma:g}" if method == "sde" else "")
        cells = [name, f"{sc_cfg:g}"]
        for run in runs:
            hit = frame[(frame["run"] == run) & (frame["method"] == method) &
                        (frame["steps"] == steps) & (frame["sc_cfg"] == sc_cfg) &
                        ((frame["gamma"] == gamma) | (method != "sde"))]
            for metric in ("gen_ppl", "entropy"):
                if hit.empty:
                    cells.append(DASH)
                    continue
                paper = matched.get(hit.index[0], {}).get(metric)
                cells.append(ours(hit.iloc[0], metric) +
                             (f" ({paper:.2f})" if _finite(paper) else ""))
        rows.append(cells)
    notes = ["Cells: ours mean ± SE (paper value in parentheses). Paper: T10 (p. 32), 64 steps, "
             "logit-normal grid, SDE γ=1."]
    return Table("T10", inputs.title, header, rows, notes + provenance_note(frame))


def generic_table(inputs: TableInputs) -> Table:
    """Fallback: every (run, sampler) row with its metrics (mean ± SE) and the matched paper values."""
    frame = inputs.frame
    metrics = [c[:-2] for c in frame.columns if c.endswith("_n") and c[:-2] in frame.columns]
    matched = matched_values(frame, inputs.points)
    header = ["Run", "Paper run", "Sampler", "Method", "Steps", "γ", "SC-CFG", "Input CFG",
              *metrics, "Paper"]
    rows = []
    for index, row in frame.iterrows():
        paper = matched.get(index, {})
        paper_text = ", ".join(f"{m}={paper[m]:g}" for m in metrics if _finite(paper.get(m)))
        rows.append([row["run"], row.get("paper_run") or DASH, row["sampler"],
                     str(row["method"]).upper(), str(int(row["steps"])), f"{row['gamma']:g}",
                     f"{row['sc_cfg']:g}", f"{row['input_cfg']:g}",
                     *[ours(row, m) for m in metrics], paper_text or DASH])
    return Table(inputs.figure_id, inputs.title, header, rows, provenance_note(frame))


TABLES: dict[str, Callable[[TableInputs], Table]] = {
    "T1": table_T1, "T3": table_T3, "T4": table_T4, "T5": table_T5, "T9": table_T9,
    "T10": table_T10,
}


def table_paths(table_id: str, out_dir: str | Path) -> list[Path]:
    """The files ``render_table`` writes for an id."""
    return [Path(out_dir) / f"{table_id}.{ext}" for ext in ("csv", "md", "tex")]


def render_table(table_id: str, inputs: TableInputs, out_dir: str | Path) -> list[Path]:
    """Build table ``table_id`` (registry or fallback) and write CSV, Markdown and LaTeX atomically."""
    table = TABLES.get(table_id, generic_table)(inputs)
    table.table_id = table_id
    csv_path, md_path, tex_path = table_paths(table_id, out_dir)
    with atomic_path(csv_path) as tmp:
        table.write_csv(tmp)
    with atomic_path(md_path) as tmp:
        tmp.write_text(table.to_markdown())
    with atomic_path(tex_path) as tmp:
        tmp.write_text(table.to_latex())
    return [csv_path, md_path, tex_path]
