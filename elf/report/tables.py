"""The paper's result and configuration tables rebuilt from our aggregates, beside the paper's values.

Each registry function ``TABLES[id](inputs) -> Table`` lays out one table as the paper does, our cells
as ``mean ± SE`` (SE over evaluation seeds when there are two or more, else the per-example SE where
the aggregate has one; T1 prefers per-example SEs as the paper's XSum column does).
``render_table(id, inputs, out_dir)`` writes ``<out_dir>/<id>.csv``, ``.md`` and ``.tex`` atomically;
an id with no registry entry gets ``generic_table`` (every row with its metrics and matched paper
values), so a new id in the config never crashes the report.

Tables (inventory ``figures_and_tables.md`` §2): T1 BLEU/ROUGE with the paper's baselines, T2 the
paper's survey (as it is), T3 the distillation curriculum from our run settings, T4 ELF+PD against
the paper's distilled baselines, T5 distillation round × steps, T6 model configurations (our
networks' parameter counts and epochs from the runs' config.json), T7 the D0 hyperparameters beside
a run's, T8 training tokens (batch × steps × L from config.json; distillation from tokens.json),
T9 mean ± SE over seeds, T10 the scaling grid, T11 the paper's baseline settings (the paper's only).
Run through the stage: ``elf report --figure T9 ...`` (see ``elf/stages/report.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from elf.config import Experiment
from elf.io import atomic_path
from elf.report.loading import (BILLION, dataset_layout, match_paper, our_token_bars, pair_metrics,
                                paper_pd_tokens, reported_se, run_epochs, trained_tokens)

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
    """BLEU on De-En and ROUGE-1/2/L on XSum: the paper's rows (baselines, ELF-B, test split), the
    authors' README for their released checkpoints (validation split), and ours per split."""
    points = inputs.points[inputs.points["src"].isin(["T1", "README"])] if not inputs.points.empty \
        else inputs.points
    header = ["Model", "Params", *[c[2] for c in T1_COLUMNS], "Split", "Source"]
    rows = []
    for (src, model), group in points.groupby(["src", "model"], sort=False):
        cells = {p["metric"]: paper_pm(p["value"], p["se"]) for _, p in group.iterrows()}
        source = "authors' README (released checkpoints)" if src == "README" else \
            "paper" + _origin_marks(group["origin"])
        rows.append([model, _t1_params(inputs.paper_values, model),
                     *[cells.get(m, DASH) for _, m, _ in T1_COLUMNS],
                     str(group["split"].iloc[0] or "test"), source])
    notes = ["Paper: T1 (p. 9), test split; XSum SE across evaluation examples; † = value from "
             "earlier work, ‡ = reproduced by the paper's authors. The authors' README states their "
             "released checkpoints' scores on the validation split of their sets."]
    frame = inputs.frame
    for _, group in _t1_groups(frame):
        first, cells, runs = group.iloc[0], {}, []
        for _, row in group.iterrows():
            for task, metric, _ in T1_COLUMNS:
                if metric not in cells and metric in row and _finite(row.get(metric)):
                    cells[metric] = ours(row, metric, prefer="examples")
                    runs.append(row["run"])
        kind = "released checkpoints" if first["run_kind"] == "released" else "ours"
        rows.append([f"ELF ({kind}) [{', '.join(dict.fromkeys(runs)) or DASH}]", DASH,
                     *[cells.get(m, DASH) for _, m, _ in T1_COLUMNS], str(first.get("split") or DASH),
                     f"ours ({sampler_text(first)})"])
    return Table("T1", inputs.title, header, rows,
                 notes + layout_notes(inputs.exp, frame) + provenance_note(frame))


def _t1_groups(frame: pd.DataFrame):
    """Our T1 rows grouped into table rows: one per sampler and run kind (trained / released)."""
    if frame.empty:
        return []
    keyed = frame.assign(released=frame["run_kind"] == "released")
    return keyed.groupby(["sampler", "released"], sort=False)


def layout_notes(exp: Experiment | None, frame: pd.DataFrame) -> list[str]:
    """The sequence layout and origin of each dataset behind a table's rows (spec §2)."""
    if exp is None or frame.empty or "dataset" not in frame:
        return []
    names = [d for d in dict.fromkeys(frame["dataset"]) if d in exp.datasets]
    return ["Data: " + "; ".join(dataset_layout(exp, name) for name in names) + "."] if names else []


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


# --------------------------------------------------------------------------------------------------
# Configuration tables: the paper's settings beside the runs' metadata (config.json, tokens.json)
# --------------------------------------------------------------------------------------------------

T2_HEADER = {"method": "Method", "process": "Process", "state": "State",
             "train_per_step_discr": "Train per-step discr.",
             "infer_per_step_discr": "Inference per-step discr.", "sep_decoder": "Separate decoder"}


def survey_cell(value: Any) -> str:
    """A Table 2 cell as the paper prints it: ✓ for yes, blank for no (YAML reads yes/no as bool)."""
    if isinstance(value, bool):
        return "✓" if value else ""
    return str(value)


def table_T2(inputs: TableInputs) -> Table:
    """The paper's survey of continuous diffusion/flow LMs (categorical), its rows as they are."""
    section = inputs.paper_values.get("table_2") or {}
    columns = section.get("columns", [])
    header = [T2_HEADER.get(c, c) for c in columns]
    rows = [[survey_cell(v) for v in row] for row in section.get("rows", [])]
    notes = [section.get("caption", ""), "✓ = yes, blank = no. " + section.get("note", ""),
             "Paper: Table 2, pp. 17–18 (v2); a survey, nothing here is measured. ELF's row is the "
             "paper's description of the method this pipeline implements."]
    return Table("T2", inputs.title, header, rows, [n for n in notes if n])


PAPER_SIZE_OF_RUN = {"R01": "ELF-B", "R02": "ELF-M", "R03": "ELF-L"}  # paper Table 6 rows


def network_params(model_fields: dict) -> int:
    """Parameters of the ELF network with these ``ModelConfig`` fields, counted on a network built on
    the meta device (no memory, no initialisation)."""
    import torch

    from elf.model import ELF, ModelConfig

    known = {f.name for f in dataclasses.fields(ModelConfig)}
    cfg = ModelConfig(**{k: v for k, v in model_fields.items() if k in known})
    with torch.device("meta"):
        network = ELF(cfg)
    return sum(p.numel() for p in network.parameters())


def paper_dims_params(size: str) -> int:
    """Our network's parameters at a paper size (``elf.model.SIZES``) and the paper's data dims:
    ``ModelConfig`` defaults (T5-small d=512, vocab 32128, L=1024, bottleneck 128, in-context)."""
    from elf.model import SIZES

    return network_params(SIZES[size])


def paper_count(text: Any) -> float:
    """``"105M"`` → 105e6 (NaN when unreadable)."""
    units = {"K": 1e3, "M": 1e6, "B": 1e9}
    text = str(text).strip()
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        return math.nan


def count_text(n: Any) -> str:
    """A parameter count as ``104.6M (104,594,304)``."""
    return f"{n / 1e6:.1f}M ({int(n):,})" if _finite(n) else DASH


def paper_model_of(config: dict) -> str | None:
    """The paper's Table 6 row of a run: by its paper run (R01–R03), else by its size name."""
    run = config.get("run") or {}
    size = (run.get("model") or {}).get("size")
    return PAPER_SIZE_OF_RUN.get(run.get("paper_run")) or (size if size in PAPER_SIZE_OF_RUN.values()
                                                           else None)


def run_model_record(run: str, meta: dict) -> dict:
    """What Table 6 shows of one of our runs, from its ``config.json``."""
    config = meta["config"]
    model = config.get("model") or {}
    return {"run": run, "size": ((config.get("run") or {}).get("model") or {}).get("size"),
            "paper_model": paper_model_of(config), "depth": model.get("depth"),
            "width": model.get("width"), "heads": model.get("heads"),
            "params": network_params(model), "recorded_params": config.get("num_parameters"),
            "tokens": trained_tokens(config), "epochs": run_epochs(config),
            "path": meta["config_path"]}


def _text(value: Any, fmt: str = "{}") -> str:
    return DASH if value is None or (isinstance(value, float) and math.isnan(value)) \
        else fmt.format(value)


def table_T6(inputs: TableInputs) -> Table:
    """Model configurations: the paper's B/M/L, our network at those sizes and the paper's dims
    (parameter count by construction), and each configured run as trained (its config.json)."""
    paper = (inputs.paper_values.get("table_6") or {}).get("entries", [])
    header = ["Model", "Source", "Depth", "Width", "Heads", "Params", "Training tokens", "Epochs"]
    records = [run_model_record(run, meta) for run, meta in inputs.runs_meta.items()]
    rows, notes = [], []
    for entry in paper:
        model = entry["model"]
        rows.append([model, "paper (T6)", *(str(entry.get(k, DASH)) for k in
                                            ("depth", "hidden", "heads", "params")),
                     DASH, f"{entry.get('owt_epochs', DASH)} (OWT)"])
        rows.append([model, "our network at the paper's dims", *(str(entry.get(k, DASH)) for k in
                                                                 ("depth", "hidden", "heads")),
                     count_text(paper_dims_params(model)), DASH, DASH])
        rows += [_t6_run_row(r) for r in records if r["paper_model"] == model]
    rows += [_t6_run_row(r) for r in records if r["paper_model"] not in {e["model"] for e in paper}]
    for r in records:
        if r["recorded_params"] is not None and r["recorded_params"] != r["params"]:
            notes.append(f"{r['run']}: config.json records {r['recorded_params']:,} parameters, "
                         f"the network built from its model settings has {r['params']:,}.")
    notes = ["Paper: Table 6, p. 30 (v2). 'Our network at the paper's dims': elf.model with the "
             "paper's size, d=512 (T5-small), vocabulary 32128, L=1024, bottleneck 128, in-context "
             "conditioning, counted on the meta device. Our runs: the network of each run's "
             "config.json; training tokens = steps × batch × L; epochs = training tokens ÷ the "
             "train store's tokens."] + notes + _metadata_note(records)
    return Table("T6", inputs.title, header, rows, notes)


def _t6_run_row(record: dict) -> list[str]:
    return [f"{record['size']} [{record['run']}]", "ours", _text(record["depth"]),
            _text(record["width"]), _text(record["heads"]), count_text(record["params"]),
            _text(record["tokens"], "{:,}"), _text(record["epochs"], "{:.2f}")]


def _metadata_note(records: list[dict]) -> list[str]:
    paths = [r["path"] for r in records]
    return ["Run metadata: " + ", ".join(paths) + "."] if paths else \
        ["No runs: the configuration lists none for this table."]


# Table 7 (D0) items: (group, paper key, shown name, our value from config.json, tolerance).
# A tolerance of None means the two are not comparable (only shown); 0 means equal as text/number.
def _lr(config: dict) -> float:
    run = config["run"]
    return run["optim"]["blr"] * run["budget"]["batch_size"] / 256  # elf.train.optim.lr_at


def _warmup_epochs(config: dict) -> float | None:
    run, epochs, tokens = config["run"], run_epochs(config), trained_tokens(config)
    if epochs is None or not tokens:
        return None
    return run["optim"]["warmup_steps"] / run["budget"]["steps"] * epochs


def _embedding_text(config: dict) -> str:
    emb = config.get("embedding") or {}
    return f"{emb.get('kind')} '{emb.get('encoder')}' (frozen)"


def _model(key: str) -> Callable[[dict], Any]:
    return lambda config: config["model"][key]


def _objective(key: str) -> Callable[[dict], Any]:
    return lambda config: config["run"]["objective"][key]


def _optim(key: str) -> Callable[[dict], Any]:
    return lambda config: config["run"]["optim"][key]


def _constant(value: Any) -> Callable[[dict], Any]:
    return lambda config: value


ARCH, NOISE, GUIDE, OPT = ("model_architecture", "denoising_and_decoding",
                           "conditioning_and_guidance", "optimization")
D0_ITEMS: list[tuple[str, str, str, Callable[[dict], Any], float | None]] = [
    (ARCH, "model", "Model", lambda c: c["run"]["model"]["size"], 0),
    (ARCH, "model_size", "Parameters", lambda c: network_params(c["model"]), 0.01),
    (ARCH, "encoder_backbone", "Encoder", _embedding_text, None),
    (ARCH, "embedding_dim", "Embedding dim d", _model("d"), 0),
    (ARCH, "bottleneck_dim", "Bottleneck", _model("bottleneck"), 0),
    (ARCH, "model_dim", "Model width", _model("width"), 0),
    (ARCH, "sequence_length", "Sequence length L", _model("max_length"), 0),
    # elf.flow.paths always draws t logit-normal (spec §4)
    (NOISE, "time_schedule", "Time schedule", _constant("logit_normal"), 0),
    (NOISE, "denoiser_p_mean", "Denoiser t mean", _objective("t_mean"), 0),
    (NOISE, "denoiser_p_std", "Denoiser t std", _objective("t_std"), 0),
    (NOISE, "denoiser_noise_scale", "Denoiser noise scale", _objective("noise_scale"), 0),
    (NOISE, "decoder_p_mean", "Decoder p mean", _objective("decode_lambda_mean"), 0),
    (NOISE, "decoder_p_std", "Decoder p std", _objective("decode_lambda_std"), 0),
    (NOISE, "decoder_noise_scale", "Decoder noise scale", _objective("decode_noise_scale"), 0),
    (NOISE, "denoiser_vs_decoder_prob", "Denoise / decode probability",
     lambda c: [round(1 - c["run"]["objective"]["decode_prob"], 12),
                c["run"]["objective"]["decode_prob"]], 0),
    (GUIDE, "self_cond_prob", "Self-conditioning probability", _objective("self_cond_prob"), 0),
    (GUIDE, "sc_cfg_train_range", "Training SC-CFG range",
     lambda c: [c["run"]["objective"]["sc_cfg_min"], c["run"]["objective"]["sc_cfg_max"]], 0),
    (GUIDE, "sc_cfg_train_distribution", "Training SC-CFG distribution",
     _constant("log-uniform in 1 + w (denser at small w)"), None),  # elf.flow.paths.sc_cfg_scale
    (GUIDE, "n_time_tokens", "Time tokens", _model("num_time_tokens"), 0),
    (GUIDE, "n_cfg_tokens", "SC-CFG tokens", _model("num_cfg_tokens"), 0),
    (GUIDE, "n_mode_tokens", "Mode tokens", _model("num_mode_tokens"), 0),
    (OPT, "optimizer", "Optimiser", _optim("name"), 0),
    (OPT, "learning_rate", "Learning rate (blr × batch / 256)", _lr, 0),
    (OPT, "weight_decay", "Weight decay", _optim("weight_decay"), 0),
    (OPT, "epochs", "Epochs", run_epochs, 0.01),
    (OPT, "global_batch_size", "Global batch", lambda c: c["run"]["budget"]["batch_size"], 0),
    (OPT, "lr_schedule", "LR schedule", _constant("constant"), 0),  # after warm-up (lr_at)
    (OPT, "warmup_epochs", "Warm-up (epochs)", _warmup_epochs, 0.01),
    (OPT, "ema_decay", "EMA decay", _optim("ema_decay"), 0),
]
D0_GROUPS = {ARCH: "Architecture", NOISE: "Denoising / decoding", GUIDE: "Conditioning / guidance",
             OPT: "Optimisation"}


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


def d0_items(config: dict, table_7: dict) -> list[dict]:
    """Table 7's hyperparameters with ours (one run's config.json) and whether they are the same."""
    items = []
    for group, key, name, ours_of, tolerance in D0_ITEMS:
        paper = (table_7.get(group) or {}).get(key)
        try:
            ours = ours_of(config)
        except (KeyError, TypeError):
            ours = None
        items.append({"group": D0_GROUPS[group], "key": key, "name": name, "paper": paper,
                      "ours": ours, "same": same_setting(paper, ours, tolerance)})
    return items


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


def table_T7(inputs: TableInputs) -> Table:
    """Default hyperparameters D0: the paper's Table 7 beside each configured run's (config.json)."""
    table_7 = inputs.paper_values.get("table_7") or {}
    runs = list(inputs.runs_meta)
    header = ["Group", "Hyperparameter", "Paper (D0)"] + \
        [c for run in runs for c in (f"Ours [{run}]", "Same")]
    per_run = [d0_items(inputs.runs_meta[run]["config"], table_7) for run in runs]
    rows = []
    for position, (group, key, name, _, _) in enumerate(D0_ITEMS):
        cells = [D0_GROUPS[group], name, setting_cell((table_7.get(group) or {}).get(key))]
        for items in per_run:
            cells += [setting_cell(items[position]["ours"]), items[position]["same"]]
        rows.append(cells)
    notes = ["Paper: Table 7, p. 30 (v2), the defaults every run follows unless noted. Ours: each "
             "run's config.json (the settings it trained with); learning rate = blr × batch / 256 "
             "(elf.train.optim); epochs = training tokens ÷ the train store's tokens. Same: equal "
             "settings (a configuration comparison, not a measurement); – = not comparable."]
    records = [{"path": inputs.runs_meta[r]["config_path"]} for r in runs]
    return Table("T7", inputs.title, header, rows, notes + _metadata_note(records))


T8_PD_LABEL = "ELF-B+PD"


def tokens_b(tokens: Any) -> str:
    """Tokens in billions as the paper prints them (three significant figures for tiny runs)."""
    if not _finite(tokens):
        return DASH
    value = float(tokens) / BILLION
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def _base_formula(meta: dict) -> str:
    config = meta["config"]
    budget = (config.get("run") or {}).get("budget") or {}
    length = (config.get("model") or {}).get("max_length")
    if trained_tokens(config) is None:
        return DASH
    return f"{budget['batch_size']} × {budget['steps']:,} × {length}"


def table_T8(inputs: TableInputs) -> Table:
    """Effective training tokens: the paper's Table 8 and ours from the runs' metadata (config.json:
    batch × steps × L; distillation rounds: tokens.json), each with its ratio to ELF."""
    section = inputs.paper_values.get("table_8") or {}
    header = ["Model", "Base (batch × steps × L)", "Distillation", "Tokens", "Tokens (B)", "× ELF",
              "Source"]
    rows = []
    for entry in section.get("entries", []):
        rows.append([entry["model"], str(entry.get("base") or DASH),
                     str(entry.get("distill") or DASH), DASH, f"{float(entry['value']):.1f}",
                     f"{float(entry['ratio_vs_elf']):.1f}", "paper (T8)"])
    bars = our_token_bars(inputs.runs_meta)
    if any(bar.rounds for bar in bars) and paper_pd_tokens(inputs.paper_values) is not None:
        extra = section["not_in_table"]
        rows.append([T8_PD_LABEL, "5 × 9.04B", "PD rounds r1–r5",
                     DASH, f"{float(extra['ELF-B+PD_train_tokens_B']):.1f}",
                     f"{float(extra['ELF-B+PD_ratio_vs_ELF']):.1f}", "paper (v2 Fig. 9b)"])
    reference = next((bar.total for bar in bars if not bar.rounds and bar.total), None)
    for bar in bars:
        meta = inputs.runs_meta[bar.run]
        base = _base_formula(meta) if not bar.rounds else \
            f"teacher {meta['tokens'].get('teacher')}: {_text(bar.base, '{:,.0f}')}"
        distill = DASH if not bar.rounds else \
            f"{len(bar.rounds)} round{'s' * (len(bar.rounds) != 1)}: {bar.distill:,.0f}"
        ratio = bar.ratio(reference if not bar.rounds else bar.base)
        rows.append([f"{'ELF+PD' if bar.rounds else 'ELF'} [{bar.run}]", base, distill,
                     _text(bar.total, "{:,.0f}"), tokens_b(bar.total), _text(ratio, "{:.1f}"),
                     f"ours ({bar.path})"])
    notes = ["Paper: Table 8, p. 31 (v2): " + section.get("caption", ""),
             "Ours: batch × steps × L of each run's config.json; a distilled run adds its rounds "
             "(tokens.json, written by `elf distill`) to its teacher's tokens. × ELF: against our "
             "first trained run (a distilled run: against its teacher), as the paper's ratio is "
             "against ELF-B. Released checkpoints were not trained here (–)."]
    return Table("T8", inputs.title, header, rows, notes)


T11_DATASETS = {"xsum": "XSum", "de_en": "De-En"}


def _t11_column(name: str) -> str:
    model, _, dataset = name.partition("_")
    return f"{model} ({T11_DATASETS.get(dataset, dataset)})" if dataset else model


def _t11_cell(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def table_T11(inputs: TableInputs) -> Table:
    """The paper's settings for its reproduced conditional baselines (Table 11): the paper's values
    only, since this pipeline trains no baselines."""
    section = inputs.paper_values.get("table_11") or {}
    columns = section.get("columns", [])
    header = ["Setting", *[f"{_t11_column(c)} (paper)" for c in columns]]
    rows = [[key.replace("_", " ").capitalize(), *[_t11_cell(v) for v in values]]
            for key, values in section.items()
            if key != "columns" and isinstance(values, list) and len(values) == len(columns)]
    notes = ["All values are the paper's (Table 11, p. 32 v2): the authors' reproduced baselines "
             "B1–B5. This pipeline trains no baselines; nothing in this table is ours.",
             section.get("note", "")]
    return Table("T11", inputs.title, header, rows, [n for n in notes if n])


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
    "T1": table_T1, "T2": table_T2, "T3": table_T3, "T4": table_T4, "T5": table_T5,
    "T6": table_T6, "T7": table_T7, "T8": table_T8, "T9": table_T9, "T10": table_T10,
    "T11": table_T11,
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
