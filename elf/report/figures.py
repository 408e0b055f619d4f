"""The paper's data figures drawn from our aggregated scores, with the paper's numbers as hollow markers.

Each registry function ``FIGURES[id](inputs) -> (Figure, points)`` draws one figure in the paper's
form and returns the matplotlib figure plus a DataFrame of exactly the numbers it plotted (one row
per marker or reference line, ``CSV_COLUMNS``). ``render_figure(id, inputs, out_dir)`` writes
``<out_dir>/<id>.png`` (and ``.pdf`` on request) and ``<out_dir>/<id>.csv`` atomically; an id with no
registry entry gets ``generic_figure`` (a Gen. PPL–entropy frontier, or a point plot of the first
metric), so a new id in the config never crashes the report.

Forms (inventory ``figures_and_tables.md`` §1):
- frontier plots, Gen. PPL (y) against entropy (x), points labelled by SC-CFG: F4, F5a, F5b, F6,
  F9c, F11 (a panel per embedding width), F12–F15 (ODE and SDE panels); F16b labels points by γ;
- steps curves, Gen. PPL against steps (log2 x), entropy labels at points: F5c, F7a, F7b, F9a, F16a;
  F7b/F9a add the distilled baselines of the paper's Table 4 as reference series;
- F17: input CFG against BLEU (De-En) and against ROUGE-L (XSum), two panels;
- bars: F1 (teaser: our 32-step SDE Gen. PPL beside the paper's; its baselines are not stated),
  F7c and F9b (training tokens, base training + distillation rounds stacked: ours from the runs'
  config.json / tokens.json, the paper's from its Table 8, in two panels; CSV in tokens).
Poor-quality regions (entropy < 5 or Gen. PPL > 300) are shaded as in the paper; the "Dataset" line
(real held-out text) is drawn where the paper has one.

Run through the stage: ``elf report --figure F4 ...`` (see ``elf/stages/report.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # headless: the report runs on cluster nodes and in CI
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from elf.io import atomic_path  # noqa: E402
from elf.report.loading import (ALL_SAMPLER_COLUMNS, BILLION, SAMPLER_COLUMNS,  # noqa: E402
                                TokenBar, baseline_points, match_paper, our_token_bars,
                                paper_pd_tokens, paper_token_bar, paper_tokens, reported_se)

POOR_ENTROPY = 5.0   # paper: entropy < 5 is repetitive
POOR_PPL = 300.0     # paper: Gen. PPL > 300 is ungrammatical
# figures with the "Dataset" reference and the calibration lines (shuffled, unigram text)
DATASET_LINE_IDS = ("F4", "F5a", "F5b", "F5c", "F6", "F7a", "F7b", "F16a")
CSV_COLUMNS = ["panel", "series", "source", "run", "paper_run", "sampler", "method", "steps",
               "gamma", "grid", "sc_cfg", "input_cfg", "x_name", "x", "x_se", "y_name", "y",
               "y_se", "label", "paper_point", "aggregate_path"]
METHOD_STYLE = {"ode": ("o", "-"), "sde": ("s", "--")}
PAPER_COLOR = "0.35"
AXIS_NAMES = {"gen_ppl": "Gen. PPL", "entropy": "Entropy", "steps": "Sampling steps",
              "input_cfg": "Input CFG", "bleu": "BLEU", "rouge1": "ROUGE-1", "rouge2": "ROUGE-2",
              "rougeL": "ROUGE-L"}


@dataclass
class FigureInputs:
    """Everything a figure function reads: our rows, the paper's points, dataset reference scores."""
    figure_id: str
    title: str
    frame: pd.DataFrame
    points: pd.DataFrame
    dataset_scores: dict[str, dict] = field(default_factory=dict)
    runs_meta: dict[str, dict] = field(default_factory=dict)  # ``loading.load_runs_meta``
    paper_values: dict = field(default_factory=dict)          # the paper-values YAML


class Recorder:
    """Collects the numbers as they are drawn, so the CSV is exactly what the figure shows."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, **fields) -> None:
        self.rows.append({col: fields.get(col) for col in CSV_COLUMNS})

    def ours(self, panel: str, series: str, row: pd.Series, x_name: str, y_name: str,
             x_se: float, y_se: float, label: str) -> None:
        self.add(panel=panel, series=series, source="ours", x_name=x_name, x=row[x_name],
                 x_se=x_se, y_name=y_name, y=row[y_name], y_se=y_se, label=label,
                 aggregate_path=row.get("aggregate_path"),
                 **{k: row.get(k) for k in ("run", "paper_run", "sampler", *SAMPLER_COLUMNS)})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=CSV_COLUMNS)


# --------------------------------------------------------------------------------------------------
# Labels and series
# --------------------------------------------------------------------------------------------------

# Paper legends for runs whose role the figure names (inventory §3).
PAPER_LEGEND = {"F5a": {"R01": "Pretrained encoder", "R07": "Scratch encoder",
                        "R08": "Pretrained emb. layer", "R09": "Gaussian emb. layer",
                        "R10": "Learnable emb. layer"},
                "F5b": {"R01": "Shared-weight denoiser & decoder",
                        "R12": "Separate denoiser & decoder"}}
EMBEDDING_KIND_LEGEND = {"token_table": "Pretrained emb. layer", "gaussian": "Gaussian emb. layer",
                         "learned": "Learnable emb. layer", "encoder": "Encoder"}


def describe(row: pd.Series, by: str, figure_id: str = "") -> str:
    """A legend text for one run/sampler attribute, as the paper words it."""
    legend = PAPER_LEGEND.get(figure_id, {})
    if row.get("paper_run") in legend:
        return legend[row["paper_run"]]
    value = row.get(by)
    text = {
        "model_size": lambda: str(value),
        "embedding": lambda: f"{EMBEDDING_KIND_LEGEND.get(row.get('embedding_kind'), '')} "
                             f"({row.get('embedding')})".strip(),
        "decode_head": lambda: "Shared-weight denoiser & decoder" if value
        else "Separate denoiser & decoder",
        "prediction": lambda: {"eps": "ε", "x": "x", "v": "v"}.get(value, str(value)) + "-prediction",
        "bottleneck": lambda: f"bottleneck {value}",
        "denoise_prob": lambda: f"denoise prob {1 - float(row.get('decode_prob')):.2g}",
        "conditioning": lambda: {"in_context": "In-context", "adaln": "AdaLN-Zero"}.get(value, value),
        "optim": lambda: {"muon": "Muon", "adamw": "AdamW"}.get(value, value),
        "grid": lambda: {"logit_normal": "Logit-normal time schedule",
                         "uniform": "Uniform time schedule"}.get(value, value),
        "run": lambda: "ELF",
    }.get(by, lambda: f"{by}={value}")
    return str(text())


def setting_text(column: str, value) -> str:
    """Short text of one sampler setting (series suffixes, point labels)."""
    if column == "method":
        return str(value).upper()
    if column == "steps":
        return f"{int(value)} step{'s' * (int(value) != 1)}"
    if column == "gamma":
        return f"γ={value:g}"
    if column == "grid":
        return "uniform grid" if value == "uniform" else "logit-normal grid"
    if column == "sc_cfg":
        return f"SC-CFG {value:g}"
    if column == "input_cfg":
        return f"input CFG {value:g}"
    return f"{column}={value}"


@dataclass
class Series:
    name: str
    color_key: str
    method: str
    rows: pd.DataFrame


def split_series(df: pd.DataFrame, label_by: str, sweep: str, figure_id: str,
                 fixed: tuple[str, ...] = ()) -> list[Series]:
    """Group rows into plotted lines: one per run and per sampler setting (other than ``sweep``)
    that varies within ``df``; rows of a line are sorted by ``sweep``."""
    varying = [c for c in ALL_SAMPLER_COLUMNS if c != sweep and c not in fixed
               and c in df.columns and df[c].nunique(dropna=False) > 1]
    out = []
    for _, group in df.groupby(["run", *varying], sort=False, dropna=False):
        first = group.iloc[0]
        base = f"{describe(first, label_by, figure_id)} [{first['run']}]"
        suffix = [setting_text(c, first[c]) for c in varying
                  if not (c == "gamma" and first["method"] == "ode")]
        name = ", ".join([base, *suffix])
        out.append(Series(name, base, first["method"], group.sort_values(sweep)))
    return out


def series_colors(series: list[Series]) -> dict[str, str]:
    """Colour per run-label; if all lines share one label, colour per line instead."""
    per_label = len({s.color_key for s in series}) > 1
    keys = [s.color_key if per_label else s.name for s in series]
    palette = {key: f"C{i % 10}" for i, key in enumerate(dict.fromkeys(keys))}
    return {s.name: palette[key] for s, key in zip(series, keys)}


# --------------------------------------------------------------------------------------------------
# Drawing helpers
# --------------------------------------------------------------------------------------------------

def new_figure(inputs: FigureInputs, n_panels: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=(4.6 * n_panels, 3.8), layout="constrained")
    axes = [fig.add_subplot(1, n_panels, i + 1) for i in range(n_panels)]
    fig.suptitle(f"{inputs.figure_id}: {inputs.title}", fontsize=9)
    return fig, axes


def has(df: pd.DataFrame, *columns: str) -> bool:
    """Whether ``df`` has rows with every column present and at least one value."""
    return not df.empty and all(c in df.columns and df[c].notna().any() for c in columns)


def no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", ha="center", va="center", transform=ax.transAxes,
            fontsize=8, color="0.4")


def finite(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def shade_poor_quality(ax, x_is_entropy: bool) -> None:
    """Red bands over entropy < 5 (when x is entropy) and Gen. PPL > 300, without moving the limits."""
    xlim, ylim = ax.get_xlim(), ax.get_ylim()
    if x_is_entropy and xlim[0] < POOR_ENTROPY:
        ax.axvspan(xlim[0], min(POOR_ENTROPY, xlim[1]), color="red", alpha=0.1, lw=0)
    if ylim[1] > POOR_PPL:
        ax.axhspan(max(POOR_PPL, ylim[0]), ylim[1], color="red", alpha=0.1, lw=0)
    ax.set_xlim(xlim)
    ax.set_ylim(ylim)


def paper_pairs(rows: pd.DataFrame, points: pd.DataFrame, metrics: tuple[str, ...]) -> list[dict]:
    """For each of our rows, the first matching paper entry that has every metric in ``metrics``:
    ``{"row_index", "entry", "point", <metric>: value for every metric of that entry}``."""
    matches = match_paper(rows, points)
    out = []
    for row_index, per_row in matches.groupby("row_index", sort=False):
        for entry, group in per_row.groupby("entry", sort=False):
            values = dict(zip(group["metric"], group["value"]))
            if all(m in values for m in metrics):
                out.append({"row_index": row_index, "entry": entry,
                            "point": ";".join(group["point"]), **values})
                break
    return out


def draw_paper(ax, rec: Recorder, panel: str, series: Series, points: pd.DataFrame, x_name: str,
               y_name: str, color: str, label_fn: Callable[[pd.Series], str]) -> None:
    """Hollow markers (dotted line) at the paper's values for the rows of one of our series."""
    settings = ("steps", "input_cfg", "sc_cfg", "gamma")
    metrics = tuple(dict.fromkeys(m for m in (x_name, y_name) if m not in settings))
    pairs = paper_pairs(series.rows, points, metrics)
    if not pairs:
        return
    xs, ys = [], []
    for pair in pairs:
        row = series.rows.loc[pair["row_index"]]
        shown = pd.Series({**row.to_dict(), **pair})  # the paper's metrics over our settings
        xs.append(shown[x_name])
        ys.append(shown[y_name])
        ax.annotate(label_fn(shown), (shown[x_name], shown[y_name]), textcoords="offset points",
                    xytext=(4, -9), fontsize=5.5, color=PAPER_COLOR)
        rec.add(panel=panel, series=series.name, source="paper", x_name=x_name, x=shown[x_name],
                y_name=y_name, y=shown[y_name], label=label_fn(shown), paper_point=pair["point"],
                **{k: row.get(k) for k in ("run", "paper_run", "sampler", *SAMPLER_COLUMNS)})
    marker, _ = METHOD_STYLE.get(series.method, ("o", "-"))
    # One legend entry for all paper lines (added in ``finish``): the colour names the series.
    ax.plot(xs, ys, linestyle=":", marker=marker, markersize=8, markerfacecolor="none",
            markeredgecolor=color, color=color, alpha=0.8, label="_nolegend_", gid="paper")


def draw_series(ax, rec: Recorder, panel: str, series: Series, color: str, x_name: str,
                y_name: str, label_fn: Callable[[pd.Series], str], se_prefer: str = "seeds") -> None:
    """Our values of one series: line, SE error bars and a text label at each point."""
    rows = series.rows[series.rows[y_name].notna() & series.rows[x_name].notna()]
    if rows.empty:
        return
    marker, line = METHOD_STYLE.get(series.method, ("o", "-"))
    x_se = [reported_se(r, x_name, se_prefer) for _, r in rows.iterrows()]
    y_se = [reported_se(r, y_name, se_prefer) for _, r in rows.iterrows()]
    ax.errorbar(rows[x_name], rows[y_name], xerr=_bars(x_se), yerr=_bars(y_se), marker=marker,
                linestyle=line, color=color, markersize=5, capsize=2, label=series.name)
    for (_, row), xe, ye in zip(rows.iterrows(), x_se, y_se):
        label = label_fn(row)
        ax.annotate(label, (row[x_name], row[y_name]), textcoords="offset points",
                    xytext=(4, 4), fontsize=6.5, color=color)
        rec.ours(panel, series.name, row, x_name, y_name, xe, ye, label)


def _bars(values: list[float]):
    clean = [v if math.isfinite(v) else 0.0 for v in values]
    return clean if any(clean) else None


def draw_dataset(ax, rec: Recorder, panel: str, df: pd.DataFrame, scores: dict[str, dict],
                 frontier: bool) -> None:
    """The "Dataset" reference: Gen. PPL of real held-out text (a line; a star on frontiers)."""
    for dataset in dict.fromkeys(df.get("dataset", pd.Series(dtype=object)).dropna()):
        metrics = scores.get(dataset, {}).get("metrics", {})
        ppl, entropy = finite(metrics.get("gen_ppl")), finite(metrics.get("entropy"))
        if not math.isfinite(ppl):
            continue
        label = f"Dataset ({dataset})" + (f", H={entropy:.2f}" if math.isfinite(entropy) else "")
        ax.axhline(ppl, color="0.2", linestyle="-.", linewidth=1, label=label)
        if frontier and math.isfinite(entropy):
            ax.plot([entropy], [ppl], marker="*", markersize=11, color="0.2", linestyle="none")
        rec.add(panel=panel, series="Dataset", source="dataset", x_name="entropy",
                x=entropy, y_name="gen_ppl", y=ppl, label=label,
                aggregate_path=scores[dataset].get("path"))
        for how, values in scores[dataset].get("calibration", {}).items():
            draw_calibration(ax, rec, panel, how, values, scores[dataset].get("path"), frontier)


def draw_calibration(ax, rec: Recorder, panel: str, how: str, metrics: dict, path: str | None,
                     frontier: bool) -> None:
    """A calibration line: held-out text with its tokens shuffled, or unigram draws. A model at or
    above it has learned the corpus's words but not their order."""
    ppl, entropy = finite(metrics.get("gen_ppl")), finite(metrics.get("entropy"))
    if not math.isfinite(ppl):
        return
    label = f"{how} text (no order)" + (f", H={entropy:.2f}" if math.isfinite(entropy) else "")
    ax.axhline(ppl, color="0.55", linestyle=":", linewidth=1, label=label)
    if frontier and math.isfinite(entropy):
        ax.plot([entropy], [ppl], marker="x", markersize=7, color="0.55", linestyle="none")
    rec.add(panel=panel, series=f"calibration: {how}", source="calibration", x_name="entropy",
            x=entropy, y_name="gen_ppl", y=ppl, label=label, aggregate_path=path)


def finish(ax, x_name: str, y_name: str, x_is_entropy: bool, legend: bool = True) -> None:
    ax.set_xlabel(AXIS_NAMES.get(x_name, x_name))
    ax.set_ylabel(AXIS_NAMES.get(y_name, y_name))
    ax.grid(alpha=0.3)
    if not ax.has_data():
        return
    if y_name == "gen_ppl":
        shade_poor_quality(ax, x_is_entropy)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        if any(line.get_gid() == "paper" for line in ax.lines):
            handles.append(Line2D([], [], linestyle=":", marker="o", markerfacecolor="none",
                                  color=PAPER_COLOR))
            labels.append("paper's value (hollow, same colour)")
        ax.legend(handles, labels, fontsize=6, loc="best", framealpha=0.8)


def entropy_label(row: pd.Series) -> str:
    value = finite(row.get("entropy"))
    return f"H={value:.2f}" if math.isfinite(value) else ""


def sweep_label(column: str) -> Callable[[pd.Series], str]:
    def label(row: pd.Series) -> str:
        value = row.get(column)
        return "" if value is None else (f"γ={value:g}" if column == "gamma" else f"{value:g}")
    return label


# --------------------------------------------------------------------------------------------------
# The two forms: frontier and steps curve
# --------------------------------------------------------------------------------------------------

def frontier(inputs: FigureInputs, label_by: str, panel_by: str | None = None,
             sweep: str = "sc_cfg", min_entropy: float | None = None,
             dataset_line: bool = False) -> tuple[Figure, pd.DataFrame]:
    """Gen. PPL against entropy, a line per run/sampler setting, points labelled by ``sweep``."""
    df = inputs.frame
    if min_entropy is not None and has(df, "entropy"):
        df = df[df["entropy"] > min_entropy]  # F9c: the paper shows only entropy > 5
    panels = _panels(df, panel_by)
    fig, axes = new_figure(inputs, len(panels))
    rec = Recorder()
    for ax, (panel, rows) in zip(axes, panels):
        ax.set_title(panel, fontsize=8)
        if not has(rows, "gen_ppl", "entropy"):
            no_data(ax, "Gen. PPL / entropy")
            continue
        series = split_series(rows, label_by, sweep, inputs.figure_id,
                              fixed=(panel_by,) if panel_by else ())
        colors = series_colors(series)
        for s in series:
            draw_series(ax, rec, panel, s, colors[s.name], "entropy", "gen_ppl", sweep_label(sweep))
            draw_paper(ax, rec, panel, s, inputs.points, "entropy", "gen_ppl", colors[s.name],
                       sweep_label(sweep))
        if dataset_line:
            draw_dataset(ax, rec, panel, rows, inputs.dataset_scores, frontier=True)
        finish(ax, "entropy", "gen_ppl", x_is_entropy=True)
    return fig, rec.frame()


def _panels(df: pd.DataFrame, panel_by: str | None) -> list[tuple[str, pd.DataFrame]]:
    if not panel_by or df.empty or panel_by not in df.columns:
        return [("", df)]
    panels = []
    for value, rows in df.groupby(panel_by, sort=True, dropna=False):
        panels.append((_panel_title(panel_by, value), rows))
    return panels


def _panel_title(panel_by: str, value) -> str:
    if panel_by == "method":
        return f"({'ODE' if value == 'ode' else 'SDE'})"
    if panel_by == "embedding_width":
        width = finite(value)
        return f"embedding dim {int(width)}" if math.isfinite(width) else "embedding dim unknown"
    return setting_text(panel_by, value)


def steps_curve(inputs: FigureInputs, label_by: str, dataset_line: bool = False,
                reference: pd.DataFrame | None = None,
                log_y: bool = False) -> tuple[Figure, pd.DataFrame]:
    """Gen. PPL against sampling steps (log2 axis), entropy labels at the points."""
    df = inputs.frame
    fig, (ax,) = new_figure(inputs, 1)
    rec = Recorder()
    if has(df, "gen_ppl", "steps"):
        series = split_series(df, label_by, "steps", inputs.figure_id)
        colors = series_colors(series)
        for s in series:
            draw_series(ax, rec, "", s, colors[s.name], "steps", "gen_ppl", entropy_label)
            draw_paper(ax, rec, "", s, inputs.points, "steps", "gen_ppl", colors[s.name],
                       entropy_label)
    else:
        no_data(ax, "Gen. PPL per steps")
    if reference is not None:
        draw_reference(ax, rec, reference)
    if dataset_line:
        draw_dataset(ax, rec, "", df, inputs.dataset_scores, frontier=False)
    if ax.has_data():
        ax.set_xscale("log", base=2)
        ticks = _step_ticks(df, reference)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        if log_y:
            ax.set_yscale("log")
    finish(ax, "steps", "gen_ppl", x_is_entropy=False)
    return fig, rec.frame()


def _step_ticks(df: pd.DataFrame, reference: pd.DataFrame | None) -> list[int]:
    """Every step count drawn (ours and the reference's), as x ticks."""
    steps = set()
    for frame in (df, reference):
        if frame is not None and "steps" in frame.columns:
            steps |= {int(s) for s in frame["steps"].dropna()}
    return sorted(steps)


def draw_reference(ax, rec: Recorder, reference: pd.DataFrame) -> None:
    """The paper's baseline curves (T4), grey-toned, hollow markers, with entropy labels."""
    markers = ["^", "v", "D", "P", "X"]
    for i, (model, rows) in enumerate(reference.groupby("model", sort=False)):
        rows = rows.sort_values("steps")
        color = f"C{(i + 5) % 10}"
        ax.plot(rows["steps"], rows["gen_ppl"], linestyle="--", marker=markers[i % len(markers)],
                markerfacecolor="none", color=color, alpha=0.8, label=f"{model} (paper)")
        for _, row in rows.iterrows():
            label = entropy_label(row)
            ax.annotate(label, (row["steps"], row["gen_ppl"]), textcoords="offset points",
                        xytext=(4, -8), fontsize=6, color=color)
            rec.add(panel="", series=f"{model} (paper)", source="paper-baseline",
                    x_name="steps", x=row["steps"], y_name="gen_ppl", y=row["gen_ppl"],
                    label=label, steps=row["steps"], paper_point=row["entry"])


# --------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------

def figure_F4(inputs: FigureInputs):
    """SC-CFG sweep of ELF-B, 64-step ODE (paper Fig. 4; paper points = T10 ODE ELF-B)."""
    return frontier(inputs, label_by="model_size", dataset_line=True)


def figure_F5a(inputs: FigureInputs):
    """Embedding choices, 64-step ODE frontiers (paper Fig. 5a)."""
    return frontier(inputs, label_by="embedding", dataset_line=True)


def figure_F5b(inputs: FigureInputs):
    """Shared-weight against separate denoiser/decoder (paper Fig. 5b)."""
    return frontier(inputs, label_by="decode_head", dataset_line=True)


def figure_F5c(inputs: FigureInputs):
    """ODE against SDE over 8–1024 steps, SC-CFG 1, with the Dataset line (paper Fig. 5c)."""
    return steps_curve(inputs, label_by="run", dataset_line=True)


def figure_F6(inputs: FigureInputs):
    """ELF-B/M/L frontiers under ODE and SDE (paper Fig. 6; paper points = T10)."""
    return frontier(inputs, label_by="model_size", dataset_line=True)


def figure_F7a(inputs: FigureInputs):
    """ELF Gen. PPL against SDE steps (paper Fig. 7a; paper points = T9)."""
    return steps_curve(inputs, label_by="run", dataset_line=True)


def _distilled_reference(inputs: FigureInputs, steps: tuple[int, ...] | None) -> pd.DataFrame:
    reference = baseline_points(inputs.points, "T4")
    if steps is not None and not reference.empty:
        reference = reference[reference["steps"].isin(steps)]
    return reference


def figure_F7b(inputs: FigureInputs):
    """ELF at 8/16/32 SDE steps against distilled baselines (paper Fig. 7b; T4 rows)."""
    return steps_curve(inputs, label_by="run", dataset_line=True,
                       reference=_distilled_reference(inputs, (8, 16, 32)))


def figure_F9a(inputs: FigureInputs):
    """ELF+PD Gen. PPL at 1–32 steps against the paper's distilled baselines (Fig. 9a; T4)."""
    return steps_curve(inputs, label_by="run", reference=_distilled_reference(inputs, None),
                       log_y=True)


def figure_F9c(inputs: FigureInputs):
    """ELF+PD SC-CFG sweep at each step count; entropy > 5 only, as the paper (Fig. 9c)."""
    return frontier(inputs, label_by="run", min_entropy=POOR_ENTROPY)


def figure_F11(inputs: FigureInputs):
    """x/v/ε prediction, a panel per embedding width (paper Fig. 11)."""
    return frontier(inputs, label_by="prediction", panel_by="embedding_width")


def figure_F12(inputs: FigureInputs):
    """Bottleneck width, ODE and SDE panels (paper Fig. 12)."""
    return frontier(inputs, label_by="bottleneck", panel_by="method")


def figure_F13(inputs: FigureInputs):
    """Denoising-mode probability, ODE and SDE panels (paper Fig. 13)."""
    return frontier(inputs, label_by="denoise_prob", panel_by="method")


def figure_F14(inputs: FigureInputs):
    """In-context against adaLN-Zero conditioning, ODE and SDE panels (paper Fig. 14)."""
    return frontier(inputs, label_by="conditioning", panel_by="method")


def figure_F15(inputs: FigureInputs):
    """Muon against AdamW, ODE and SDE panels (paper Fig. 15)."""
    return frontier(inputs, label_by="optim", panel_by="method")


def figure_F16a(inputs: FigureInputs):
    """Logit-normal against uniform time grid over 8–1024 ODE steps (paper Fig. 16a)."""
    return steps_curve(inputs, label_by="grid", dataset_line=True)


def figure_F16b(inputs: FigureInputs):
    """SDE noise re-injection scale γ sweep on the PPL–entropy plane (paper Fig. 16b)."""
    return frontier(inputs, label_by="run", sweep="gamma")


def figure_F17(inputs: FigureInputs):
    """Input CFG against BLEU (De-En) and ROUGE-L (XSum) (paper Fig. 17; T1 points hollow)."""
    df = inputs.frame
    panels = [("(a) De-En", "translation", "bleu"), ("(b) XSum", "summarization", "rougeL")]
    fig, axes = new_figure(inputs, 2)
    rec = Recorder()
    for ax, (panel, task, metric) in zip(axes, panels):
        ax.set_title(panel, fontsize=8)
        rows = df[df["task"] == task] if has(df, "task") else df.iloc[0:0]
        if not has(rows, metric, "input_cfg"):
            no_data(ax, AXIS_NAMES[metric])
            continue
        series = split_series(rows, "run", "input_cfg", inputs.figure_id)
        colors = series_colors(series)
        for s in series:
            label = sweep_label("input_cfg")
            draw_series(ax, rec, panel, s, colors[s.name], "input_cfg", metric, label,
                        se_prefer="examples")
            draw_paper(ax, rec, panel, s, inputs.points, "input_cfg", metric, colors[s.name], label)
        finish(ax, "input_cfg", metric, x_is_entropy=False)
    return fig, rec.frame()


# --------------------------------------------------------------------------------------------------
# Bar figures: the teaser (F1) and the training-token bars (F7c, F9b)
# --------------------------------------------------------------------------------------------------

F1_BASELINES_NOT_STATED = (
    "Baseline bars of the paper's teaser (MDLM, Duo, FLM at 1024 steps without distillation; "
    "MDLM+SDTT, Duo+DCD, FMLM at 32 steps; LangFlow at 1024 steps): values not stated in the "
    "paper, so not drawn.")
OURS_COLOR, PAPER_BAR_COLOR, DISTILL_COLORS = "C0", "0.55", ("C2", "C1", "C4", "C3", "C5", "C6")


def paper_t9_point(points: pd.DataFrame, steps: int) -> dict:
    """The paper's Table 9 Gen. PPL (and SE) of ELF-B at ``steps`` SDE steps ({} if absent)."""
    if points.empty:
        return {}
    rows = points[(points["src"] == "T9") & (points["metric"] == "gen_ppl")
                  & (points["steps"] == steps)]
    return rows.iloc[0].to_dict() if not rows.empty else {}


def figure_F1(inputs: FigureInputs):
    """Teaser bars (paper Fig. 1): ELF's Gen. PPL at 32 SDE steps without distillation, ours (one bar
    per run and sampler) beside the paper's (Table 9's 32-step value); baselines are not stated."""
    fig, (ax,) = new_figure(inputs, 1)
    rec = Recorder()
    rows = inputs.frame[inputs.frame["gen_ppl"].notna()] if has(inputs.frame, "gen_ppl") \
        else inputs.frame.iloc[0:0]
    names = []
    for _, row in rows.iterrows():
        position = len(names)
        se = reported_se(row, "gen_ppl")
        ax.bar(position, row["gen_ppl"], yerr=se if math.isfinite(se) else None, capsize=3,
               color=OURS_COLOR)
        names.append(f"ELF (ours) [{row['run']}]\n{setting_text('method', row['method'])} "
                     f"{setting_text('steps', row['steps'])}")
        rec.add(panel="", series=names[-1].replace("\n", ", "), source="ours", x_name="bar",
                x=position, y_name="gen_ppl", y=row["gen_ppl"], y_se=se,
                label=f"{row['gen_ppl']:.2f}", aggregate_path=row.get("aggregate_path"),
                **{k: row.get(k) for k in ("run", "paper_run", "sampler", *SAMPLER_COLUMNS)})
    paper = paper_t9_point(inputs.points, 32)
    if paper:
        position = len(names)
        se = finite(paper.get("se"))
        ax.bar(position, paper["value"], yerr=se if math.isfinite(se) else None, capsize=3,
               color="none", edgecolor=PAPER_BAR_COLOR, hatch="//")
        names.append("ELF-B (paper, T9)\nSDE 32 steps")
        rec.add(panel="", series="ELF-B (paper, T9)", source="paper", paper_run=paper["paper_run"],
                method=paper["method"], steps=paper["steps"], gamma=paper["gamma"],
                sc_cfg=paper["sc_cfg"], x_name="bar", x=position, y_name="gen_ppl",
                y=paper["value"], y_se=se, label=f"{paper['value']:.2f}", paper_point=paper["point"])
    for position, row in rec.frame().iterrows():
        ax.annotate(row["label"], (position, row["y"]), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=7)
    if names:
        ax.set_xticks(range(len(names)), names, fontsize=6.5)
        bar_slots(ax, len(names))
    else:
        no_data(ax, "Gen. PPL")
    ax.set_ylabel(AXIS_NAMES["gen_ppl"])
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.5, 0.005, F1_BASELINES_NOT_STATED, ha="center", va="bottom", fontsize=6,
             wrap=True, color="0.3")
    fig.get_layout_engine().set(rect=(0, 0.08, 1, 0.92))  # room for the note under the axes
    return fig, rec.frame()


def bar_slots(ax, n_bars: int, slots: int = 3) -> None:
    """Room for at least ``slots`` bars, so that one or two bars are not drawn full-width."""
    pad = max(0.0, (slots - n_bars) / 2)
    ax.set_xlim(-0.5 - pad, n_bars - 0.5 + pad)


def token_text(tokens: float, billions: bool) -> str:
    if billions:
        return f"{tokens / BILLION:.1f}B"
    return f"{tokens:,.0f}"


def draw_token_bars(ax, rec: Recorder, panel: str, bars: list[TokenBar], reference: float | None,
                    billions: bool) -> None:
    """Stacked bars: base training (solid) with each distillation round (hatched) on top; the total
    and its ratio to ``reference`` above each bar. The CSV gets one row per segment, in tokens."""
    scale = BILLION if billions else 1.0
    legend_done: set[str] = set()
    for position, bar in enumerate(bars):
        if bar.base is None:
            ax.text(position, 0, "no token count", rotation=90, ha="center", va="bottom", fontsize=6)
            continue
        segments = [("base training", bar.base)] + list(bar.rounds)
        bottom = 0.0
        for index, (name, tokens) in enumerate(segments):
            key = "Base training" if index == 0 else "Extra distillation" \
                if bar.source == "paper" else f"Distillation round {index} ({name})"
            color = (OURS_COLOR if bar.source == "ours" else PAPER_BAR_COLOR) if index == 0 \
                else DISTILL_COLORS[(index - 1) % len(DISTILL_COLORS)]
            ax.bar(position, tokens / scale, bottom=bottom / scale, color=color,
                   hatch=None if index == 0 else "//", edgecolor="white", linewidth=0.5,
                   label=key if key not in legend_done else "_nolegend_")
            legend_done.add(key)
            rec.add(panel=panel, series=bar.label, source=bar.source, run=bar.run, x_name="bar",
                    x=position, y_name="train_tokens", y=tokens, label=name,
                    aggregate_path=bar.path)
            bottom += tokens
        ratio = bar.ratio(reference)
        ax.annotate(token_text(bar.total, billions) + (f" ({ratio:.1f}×)" if ratio else ""),
                    (position, bar.total / scale), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=6.5)
    ax.set_xticks(range(len(bars)), [bar.label for bar in bars], fontsize=6.5, rotation=15)
    bar_slots(ax, len(bars))
    ax.set_ylabel("Training tokens" + (" (B)" if billions else ""))
    ax.grid(axis="y", alpha=0.3)
    if bars:
        ax.legend(fontsize=6, loc="upper left")
    else:
        no_data(ax, "training tokens")


def run_label(inputs: FigureInputs, run: str) -> str:
    meta = inputs.runs_meta[run]
    return f"ELF+PD [{run}]" if meta.get("tokens") else f"ELF [{run}]"


def _token_figure(inputs: FigureInputs, paper_bars: list[TokenBar],
                  paper_reference: float | None) -> tuple[Figure, pd.DataFrame]:
    """Ours (tokens, from the runs' metadata) beside the paper's (billions): two panels, since a
    scaled-down run and the paper differ by orders of magnitude; the ratios compare."""
    fig, (ours_ax, paper_ax) = new_figure(inputs, 2)
    rec = Recorder()
    ours = our_token_bars(inputs.runs_meta, {r: run_label(inputs, r) for r in inputs.runs_meta})
    reference = ours[0].base if ours else None
    ours_ax.set_title("(ours: runs' config.json / tokens.json)", fontsize=8)
    draw_token_bars(ours_ax, rec, "ours", ours, reference, billions=False)
    paper_ax.set_title("(paper)", fontsize=8)
    draw_token_bars(paper_ax, rec, "paper", paper_bars, paper_reference, billions=True)
    return fig, rec.frame()


def figure_F7c(inputs: FigureInputs):
    """Training-token bars, base training and extra distillation (paper Fig. 7c, from Table 8):
    ours from the runs' metadata, the paper's ELF-B and baselines (ratios × ELF)."""
    pv = inputs.paper_values
    paper = [paper_token_bar(pv, "ELF", "ELF-B"),
             paper_token_bar(pv, "MDLM (+SDTT)", "MDLM", "MDLM+SDTT"),
             paper_token_bar(pv, "Duo (+DCD)", "Duo", "Duo+DCD"),
             paper_token_bar(pv, "FLM (FMLM)", "FLM", "FMLM")]
    return _token_figure(inputs, paper, paper[0].base)


def figure_F9b(inputs: FigureInputs):
    """ELF+PD training tokens (paper Fig. 9b): ours from each distillation chain's tokens.json
    (teacher + one segment per round), the paper's 90B (2.0× base) and the distilled baselines."""
    pv = inputs.paper_values
    elf_base = paper_tokens(pv).get("ELF-B")
    paper = [paper_token_bar(pv, "ELF+PD", "ELF-B", total=paper_pd_tokens(pv)),
             paper_token_bar(pv, "MDLM+SDTT", "MDLM", "MDLM+SDTT"),
             paper_token_bar(pv, "Duo+DCD", "Duo", "Duo+DCD"),
             paper_token_bar(pv, "FMLM", "FLM", "FMLM")]
    return _token_figure(inputs, paper, elf_base)


def generic_figure(inputs: FigureInputs):
    """Fallback for ids without a registry entry: a frontier if Gen. PPL and entropy exist, else
    the first metric per (run, sampler)."""
    df = inputs.frame
    if has(df, "gen_ppl", "entropy"):
        return frontier(inputs, label_by="run")
    metrics = [c[:-2] for c in df.columns if c.endswith("_n") and c[:-2] in df.columns]
    fig, (ax,) = new_figure(inputs, 1)
    rec = Recorder()
    if not metrics:
        no_data(ax, "no metrics")
        return fig, rec.frame()
    metric = metrics[0]
    df = df.assign(position=np.arange(len(df)))
    for position, (_, row) in enumerate(df.iterrows()):
        se = reported_se(row, metric)
        ax.errorbar([position], [row[metric]], yerr=[se] if math.isfinite(se) else None,
                    marker="o", color="C0", capsize=2)
        rec.ours("", f"{row['run']}/{row['sampler']}", row, "position", metric, math.nan, se,
                 f"{row['run']}/{row['sampler']}")
    ax.set_xticks(range(len(df)), [f"{r}/{s}" for r, s in zip(df["run"], df["sampler"])],
                  rotation=45, ha="right", fontsize=6)
    finish(ax, "position", metric, x_is_entropy=False, legend=False)
    return fig, rec.frame()


FIGURES: dict[str, Callable[[FigureInputs], tuple[Figure, pd.DataFrame]]] = {
    "F4": figure_F4, "F5a": figure_F5a, "F5b": figure_F5b, "F5c": figure_F5c, "F6": figure_F6,
    "F7a": figure_F7a, "F7b": figure_F7b, "F9a": figure_F9a, "F9c": figure_F9c,
    "F11": figure_F11, "F12": figure_F12, "F13": figure_F13, "F14": figure_F14,
    "F15": figure_F15, "F16a": figure_F16a, "F16b": figure_F16b, "F17": figure_F17,
    "F1": figure_F1, "F7c": figure_F7c, "F9b": figure_F9b,
}


def figure_paths(figure_id: str, out_dir: str | Path, pdf: bool = False) -> list[Path]:
    """The files ``render_figure`` writes for an id."""
    out_dir = Path(out_dir)
    paths = [out_dir / f"{figure_id}.png", out_dir / f"{figure_id}.csv"]
    return paths + ([out_dir / f"{figure_id}.pdf"] if pdf else [])


def render_figure(figure_id: str, inputs: FigureInputs, out_dir: str | Path,
                  pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw figure ``figure_id`` (registry or fallback) and write PNG [+ PDF] and CSV atomically."""
    fig, plotted = FIGURES.get(figure_id, generic_figure)(inputs)
    return write_figure(figure_id, fig, plotted, out_dir, pdf, dpi)


def write_figure(figure_id: str, fig: Figure, plotted: pd.DataFrame, out_dir: str | Path,
                 pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Write a drawn figure as PNG [+ PDF] and its plotted numbers as CSV, atomically."""
    paths = figure_paths(figure_id, out_dir, pdf)
    with atomic_path(paths[0]) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    with atomic_path(paths[1]) as tmp:
        plotted.to_csv(tmp, index=False)
    if pdf:
        with atomic_path(paths[2]) as tmp:
            fig.savefig(tmp, format="pdf", metadata={"Creator": None, "Producer": None,
                                                     "CreationDate": None})
    return paths
