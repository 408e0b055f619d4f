"""Plotting primitives of the report's figures: the inputs a figure reads, the recorder of what it
plots (its CSV is exactly what the PNG shows), legends and series, our points with SE bars, the
paper's values as hollow markers, the "Dataset" and calibration lines, the poor-quality shading, and
writing the files. The forms built from them are ``elf.report.templates``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # headless: the report runs on cluster nodes and in CI
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from elf import methods
from elf.artifacts.layout import rendered_names  # noqa: E402
from elf.io import atomic_path  # noqa: E402
from elf.report.paper import match_paper  # noqa: E402
from elf.report.results import ALL_SAMPLER_COLUMNS, SAMPLER_COLUMNS, reported_se  # noqa: E402

POOR_ENTROPY = 5.0   # paper: entropy < 5 is repetitive
POOR_PPL = 300.0     # paper: Gen. PPL > 300 is ungrammatical
# Where a figure reads a "Dataset" line, poor quality is relative to it instead (the paper's
# thresholds are for OWT scored by GPT-2 Large; on the embedded corpus every point sits below
# entropy 5): entropy more than ENTROPY_MARGIN below the Dataset line's, or Gen. PPL above
# PPL_FACTOR times its — the embedded bar's own checks (benchmarks/embedded_bar.py).
ENTROPY_MARGIN = 0.3
PPL_FACTOR = 2.0
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
    """Everything a figure template reads: our rows, the paper's points, dataset reference scores, run
    metadata, the paper's values, the samples or trajectory shown."""
    figure_id: str
    title: str
    frame: pd.DataFrame
    points: pd.DataFrame
    dataset_scores: dict[str, dict] = field(default_factory=dict)
    runs_meta: dict[str, dict] = field(default_factory=dict)  # ``runs.load_runs_meta``
    paper_values: dict = field(default_factory=dict)          # the paper-values YAML
    shown: dict = field(default_factory=dict)                 # ``qualitative.load_qualitative``


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


# --------------------------------------------------------------------------------------------------
EMBEDDING_KIND_LEGEND = {"token_table": "Pretrained emb. layer", "gaussian": "Gaussian emb. layer",
                         "learned": "Learnable emb. layer", "encoder": "Encoder"}


def describe(row: pd.Series, by: str, legend: dict | None = None) -> str:
    """A legend text for one run/sampler attribute, as the paper words it (``legend``: the figure's
    own words for some paper runs, from its registry entry)."""
    legend = legend or {}
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
        return methods.label(value)
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


def split_series(df: pd.DataFrame, label_by: str, sweep: str, legend: dict | None = None,
                 fixed: tuple[str, ...] = ()) -> list[Series]:
    """Group rows into plotted lines: one per run and per sampler setting (other than ``sweep``)
    that varies within ``df``; rows of a line are sorted by ``sweep``."""
    varying = [c for c in ALL_SAMPLER_COLUMNS if c != sweep and c not in fixed
               and c in df.columns and df[c].nunique(dropna=False) > 1]
    out = []
    for _, group in df.groupby(["run", *varying], sort=False, dropna=False):
        first = group.iloc[0]
        base = f"{describe(first, label_by, legend)} [{first['run']}]"
        suffix = [setting_text(c, first[c]) for c in varying
                  if not (c == "gamma" and not methods.uses_gamma(first["method"]))]
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


@dataclass(frozen=True)
class PoorQuality:
    """The shaded region: entropy below ``entropy`` or Gen. PPL above ``gen_ppl``; ``note`` says
    which thresholds they are (the figure's caption)."""
    entropy: float
    gen_ppl: float
    note: str


PAPER_POOR = PoorQuality(POOR_ENTROPY, POOR_PPL, "shaded: entropy < 5 or Gen. PPL > 300 (the paper's)")


def poor_quality(df: pd.DataFrame, scores: dict[str, dict]) -> PoorQuality:
    """The poor-quality thresholds of a figure: relative to the Dataset line of its (first)
    unconditional dataset when the figure reads one, else the paper's."""
    for dataset in dict.fromkeys(df.get("dataset", pd.Series(dtype=object)).dropna()):
        metrics = scores.get(dataset, {}).get("metrics", {})
        ppl, entropy = finite(metrics.get("gen_ppl")), finite(metrics.get("entropy"))
        if math.isfinite(ppl) and math.isfinite(entropy):
            low, high = entropy - ENTROPY_MARGIN, PPL_FACTOR * ppl
            return PoorQuality(low, high, (
                f"shaded: entropy < {low:.2f} (Dataset − {ENTROPY_MARGIN:g}) or Gen. PPL > {high:.1f} "
                f"({PPL_FACTOR:g} × Dataset), relative to this corpus's Dataset line ({dataset}); the "
                f"paper's thresholds (entropy {POOR_ENTROPY:g}, Gen. PPL {POOR_PPL:g}) are for OWT "
                "under GPT-2 Large"))
    return PAPER_POOR


def shade_poor_quality(ax, x_is_entropy: bool, poor: PoorQuality = PAPER_POOR) -> None:
    """Red bands over entropy < ``poor.entropy`` (when x is entropy) and Gen. PPL > ``poor.gen_ppl``,
    without moving the limits."""
    xlim, ylim = ax.get_xlim(), ax.get_ylim()
    if x_is_entropy and xlim[0] < poor.entropy:
        ax.axvspan(xlim[0], min(poor.entropy, xlim[1]), color="red", alpha=0.1, lw=0)
    if ylim[1] > poor.gen_ppl:
        ax.axhspan(max(poor.gen_ppl, ylim[0]), ylim[1], color="red", alpha=0.1, lw=0)
    ax.set_xlim(xlim)
    ax.set_ylim(ylim)


def caption(fig: Figure, lines: list[str]) -> None:
    """Notes under the figure (its caption), wrapped to the figure's width."""
    import textwrap

    width = int(fig.get_figwidth() * 22)
    text = "\n".join(textwrap.fill(line, width) for line in dict.fromkeys(lines) if line)
    if text:
        fig.supxlabel(text, fontsize=5.5, color="0.3", ha="center")


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


# How a reference line is drawn: the "Dataset" (real held-out text) and the calibration lines
REFERENCE_STYLES = {"dataset": dict(color="0.2", linestyle="-.", marker="*", markersize=11),
                    "calibration": dict(color="0.55", linestyle=":", marker="x", markersize=7)}


def draw_dataset(ax, rec: Recorder, panel: str, df: pd.DataFrame, scores: dict[str, dict],
                 frontier: bool) -> None:
    """The "Dataset" reference: Gen. PPL of real held-out text (a line; a star on frontiers), and
    its calibration lines: the same text with its tokens shuffled, and unigram draws (a model at or
    above one has learned the corpus's words but not their order)."""
    for dataset in dict.fromkeys(df.get("dataset", pd.Series(dtype=object)).dropna()):
        path = scores.get(dataset, {}).get("path")
        if not _reference_line(ax, rec, panel, scores.get(dataset, {}).get("metrics", {}),
                               f"Dataset ({dataset})", "Dataset", "dataset", path, frontier):
            continue
        for how, values in scores[dataset].get("calibration", {}).items():
            _reference_line(ax, rec, panel, values, f"{how} text (no order)", f"calibration: {how}",
                            "calibration", path, frontier)


def _reference_line(ax, rec: Recorder, panel: str, metrics: dict, name: str, series: str,
                    source: str, path: str | None, frontier: bool) -> bool:
    """One horizontal reference line at a Gen. PPL (with its entropy as a point on frontiers);
    False when there is no finite Gen. PPL to draw."""
    ppl, entropy = finite(metrics.get("gen_ppl")), finite(metrics.get("entropy"))
    if not math.isfinite(ppl):
        return False
    style = REFERENCE_STYLES[source]
    label = name + (f", H={entropy:.2f}" if math.isfinite(entropy) else "")
    ax.axhline(ppl, color=style["color"], linestyle=style["linestyle"], linewidth=1, label=label)
    if frontier and math.isfinite(entropy):
        ax.plot([entropy], [ppl], marker=style["marker"], markersize=style["markersize"],
                color=style["color"], linestyle="none")
    rec.add(panel=panel, series=series, source=source, x_name="entropy", x=entropy, y_name="gen_ppl",
            y=ppl, label=label, aggregate_path=path)
    return True


def finish(ax, x_name: str, y_name: str, x_is_entropy: bool, legend: bool = True,
           poor: PoorQuality = PAPER_POOR) -> None:
    ax.set_xlabel(AXIS_NAMES.get(x_name, x_name))
    ax.set_ylabel(AXIS_NAMES.get(y_name, y_name))
    ax.grid(alpha=0.3)
    if not ax.has_data():
        return
    if y_name == "gen_ppl":
        shade_poor_quality(ax, x_is_entropy, poor)
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
# Writing
# --------------------------------------------------------------------------------------------------

def write_figure(figure_id: str, fig: Figure, plotted: pd.DataFrame, out_dir: str | Path,
                 pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Write a drawn figure into the folder ``out_dir`` as PNG [+ PDF] and its plotted numbers as
    CSV, atomically."""
    paths = [Path(out_dir) / name for name in rendered_names(figure_id, "figure", pdf)]
    with atomic_path(paths[0]) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    with atomic_path(paths[1]) as tmp:
        plotted.to_csv(tmp, index=False)
    if pdf:
        with atomic_path(paths[2]) as tmp:
            fig.savefig(tmp, format="pdf", metadata={"Creator": None, "Producer": None,
                                                     "CreationDate": None})
    return paths
