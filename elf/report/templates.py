"""The forms the paper's figures take, each a function ``(inputs, **options) -> (Figure, points)``
(``points``: a DataFrame of exactly the numbers drawn, ``CSV_COLUMNS``); ``elf.report.registry``
says which form and options each figure id uses.

Forms (inventory ``figures_and_tables.md`` §1):
- ``frontier``: Gen. PPL (y) against entropy (x), a line per run/sampler setting, points labelled by
  SC-CFG (or γ), optionally a panel per setting;
- ``steps_curve``: Gen. PPL against steps (log2 x), entropy labels at points, optionally the paper's
  distilled baselines (Table 4) as reference series;
- ``input_cfg_panels``: input CFG against BLEU (De-En) and ROUGE-L (XSum), two panels (F17);
- ``teaser_bars``: our 32-step SDE Gen. PPL beside the paper's Table 9 value (F1; its baselines are
  not stated);
- ``token_bars``: training tokens, base training + distillation rounds stacked, ours from the runs'
  config.json / tokens.json beside the paper's Table 8 (F7c, F9b; CSV in tokens);
- ``generic_figure``: a frontier if Gen. PPL and entropy exist, else the first metric per pair.
Poor-quality regions are shaded: relative to the "Dataset" line (real held-out text) where the figure's
inputs carry dataset scores (``plotting.poor_quality``; the caption says so), else as in the paper
(entropy < 5 or Gen. PPL > 300); the Dataset line is drawn there too.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from elf.report.registry import PD_TOTAL
from elf.report.paper import baseline_points, pair_metrics
from elf.report.plotting import (AXIS_NAMES, SAMPLER_COLUMNS, FigureInputs, Recorder, caption,
                                 draw_dataset, draw_paper, draw_series, entropy_label, finish, finite, has,
                                 new_figure, no_data, poor_quality, series_colors, setting_text,
                                 split_series, sweep_label)
from elf.report.results import reported_se
from elf.report.runs import (BILLION, TokenBar, our_token_bars, paper_pd_tokens, paper_token_bar,
                             paper_tokens)



# --------------------------------------------------------------------------------------------------
# Frontiers and steps curves
# --------------------------------------------------------------------------------------------------

def frontier(inputs: FigureInputs, label_by: str, panel_by: str | None = None,
             sweep: str = "sc_cfg", good_entropy_only: bool = False,
             dataset_line: bool = False, sweep_note: bool = False, sweep_paper: dict | None = None,
             legend: dict | None = None) -> tuple[Figure, pd.DataFrame]:
    """Gen. PPL against entropy, a line per run/sampler setting, points labelled by ``sweep``;
    ``sweep_note``: the caption says whether the sweep moves the points beyond their noise, and how
    far the paper's own sweep moves (its values whose columns equal ``sweep_paper``'s);
    ``legend``: the paper's words for some paper runs."""
    df = inputs.frame
    poor = poor_quality(df, inputs.dataset_scores)
    if good_entropy_only and has(df, "entropy"):
        df = df[df["entropy"] > poor.entropy]  # F9c: the paper shows only entropy above its threshold
    panels = _panels(df, panel_by)
    fig, axes = new_figure(inputs, len(panels))
    rec = Recorder()
    for ax, (panel, rows) in zip(axes, panels):
        ax.set_title(panel, fontsize=8)
        if not has(rows, "gen_ppl", "entropy"):
            no_data(ax, "Gen. PPL / entropy")
            continue
        series = split_series(rows, label_by, sweep, legend, fixed=(panel_by,) if panel_by else ())
        colors = series_colors(series)
        for s in series:
            draw_series(ax, rec, panel, s, colors[s.name], "entropy", "gen_ppl", sweep_label(sweep))
            draw_paper(ax, rec, panel, s, inputs.points, "entropy", "gen_ppl", colors[s.name],
                       sweep_label(sweep))
        if dataset_line:
            draw_dataset(ax, rec, panel, rows, inputs.dataset_scores, frontier=True)
        finish(ax, "entropy", "gen_ppl", x_is_entropy=True, poor=poor)
    separate = has(df, "decode_head") and (df["decode_head"] == False).any()  # noqa: E712
    paper_sweep = select_points(inputs.points, sweep_paper)
    caption(fig, [poor.note, sweep_effect(df, label_by, sweep, legend, paper_sweep) if sweep_note else "",
                  SEPARATE_DECODER_DEVIATION if separate else ""])
    return fig, rec.frame()


SEPARATE_DECODER_DEVIATION = (
    "Deviation from the paper: the separate decoders (R11; R13/R14 at 768/1024-d) are built from "
    "ELF blocks (RoPE, SwiGLU); the paper states a mirror of the T5 encoder. The runs decoded "
    "through them are drawn with this difference.")


def _se_or_zero(row: pd.Series, metric: str) -> float:
    se = finite(reported_se(row, metric))
    return se if math.isfinite(se) else 0.0


def sweep_effect(df: pd.DataFrame, label_by: str, sweep: str, legend: dict | None = None,
                 paper: pd.DataFrame | None = None) -> str:
    """Whether each series' sweep ends differ beyond twice their combined SE, said per metric (Gen.
    PPL, entropy), and, where ``paper`` holds the paper's values at the same ends, how that compares
    with the paper's own sweep; a sweep that moves nothing, or far less than the paper's, says so."""
    if not has(df, "gen_ppl", "entropy", sweep):
        return ""
    parts, moved, ppl_change = [], {}, []
    for series in split_series(df, label_by, sweep, legend):
        rows = series.rows.sort_values(sweep)
        if len(rows) < 2:
            continue
        lo, hi = rows.iloc[0], rows.iloc[-1]
        cells = []
        for metric in ("gen_ppl", "entropy"):
            delta = finite(hi[metric]) - finite(lo[metric])
            noise = 2 * math.hypot(_se_or_zero(lo, metric), _se_or_zero(hi, metric))
            beyond = abs(delta) > noise
            moved[AXIS_NAMES[metric]] = moved.get(AXIS_NAMES[metric], False) or beyond
            relative = f", {100 * delta / finite(lo[metric]):+.0f} %" if metric == "gen_ppl" else ""
            cells.append(f"{AXIS_NAMES[metric]} {delta:+.2f}{relative} (2 SE {noise:.2f}: "
                         f"{'beyond' if beyond else 'within'} noise)")
        ppl_change.append(finite(hi["gen_ppl"]) / finite(lo["gen_ppl"]) - 1)
        parts.append(f"{series.name}: {sweep} {lo[sweep]:g} → {hi[sweep]:g} moves " + ", ".join(cells))
    if not parts:
        return ""
    ends = (float(df[sweep].min()), float(df[sweep].max()))
    theirs = paper_sweep_ends(paper, sweep, *ends) if paper is not None else None
    beyond = [name for name, flag in moved.items() if flag]
    within = [name for name, flag in moved.items() if not flag]
    why = ("benchmarks/guidance.py measures why, per t: how much self-conditioning improves x̂ and "
           "how large x̂_c − x̂_u is against the flow error; its records are in "
           "benchmarks/results/guidance/")
    if not beyond:
        verdict = f"the sweep is inert here: no end moves beyond twice its combined SE ({why})"
    else:
        verdict = f"the sweep moves the points beyond their noise in {' and '.join(beyond)}" + \
            (f" (not in {' or '.join(within)})" if within else "")
    if theirs:
        (label, steps), values = theirs
        paper_change = values["gen_ppl"][1] / values["gen_ppl"][0] - 1
        verdict += (f"; the paper's {label} ({steps}-step) sweep over the same ends moves Gen. PPL "
                    f"{100 * paper_change:+.0f} % and entropy "
                    f"{values['entropy'][1] - values['entropy'][0]:+.2f}")
        strongest = max(ppl_change, key=abs, default=0.0)
        if beyond and abs(strongest) < abs(paper_change) / 2:
            verdict += (f": guidance acts here at under half the paper's size (at most "
                        f"{100 * strongest:+.0f} % in Gen. PPL; {why})")
    return "; ".join(parts) + f" — {verdict}"


def select_points(points: pd.DataFrame, columns: dict | None) -> pd.DataFrame | None:
    """The paper's values whose columns equal ``columns`` (None: none selected)."""
    if not columns or points.empty:
        return None
    keep = np.ones(len(points), dtype=bool)
    for column, value in columns.items():
        keep &= (points[column] == value).to_numpy()
    return points[keep]


def paper_sweep_ends(points: pd.DataFrame, sweep: str, lo: float,
                     hi: float) -> tuple[tuple[str, int], dict] | None:
    """The paper's Gen. PPL and entropy at ``sweep`` = lo and hi, from the first of its settings (model,
    method, steps) that has all four: ``((model, steps), {metric: (at lo, at hi)})``. Steps may differ
    from ours (the paper sweeps at 64 steps): this compares the sweep's size, not its points."""
    paired = pair_metrics(points)
    if not has(paired, "gen_ppl", "entropy", sweep):
        return None
    for (model, _, steps), group in paired.groupby(["model", "method", "steps"], sort=False):
        at = pd.to_numeric(group[sweep], errors="coerce")
        rows = [group[np.isclose(at, end)] for end in (lo, hi)]
        if any(r.empty for r in rows):
            continue
        ends = {m: (finite(rows[0][m].iloc[0]), finite(rows[1][m].iloc[0])) for m in ("gen_ppl", "entropy")}
        if all(math.isfinite(v) for pair in ends.values() for v in pair):
            return (str(model), int(steps)), ends
    return None


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
                baselines: str | None = None, baseline_steps: tuple[int, ...] | None = None,
                log_y: bool = False, baselines_not_drawn: str = "",
                baselines_assumed: str = "") -> tuple[Figure, pd.DataFrame]:
    """Gen. PPL against sampling steps (log2 axis), entropy labels at the points; ``baselines``: the
    paper's source (e.g. "T4") whose baseline rows are drawn as reference series (at
    ``baseline_steps`` only, when given); ``baselines_not_drawn`` / ``baselines_assumed``: what the
    note under the axes says of the paper's baselines when none are drawn / of those drawn."""
    df = inputs.frame
    reference = _baselines(inputs, baselines, baseline_steps) if baselines else None
    fig, (ax,) = new_figure(inputs, 1)
    rec = Recorder()
    if has(df, "gen_ppl", "steps"):
        series = split_series(df, label_by, "steps")
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
    note = baselines_note(baselines, reference, baseline_steps, baselines_not_drawn, baselines_assumed)
    if note:
        fig.text(0.5, 0.005, note, ha="center", va="bottom", fontsize=6, wrap=True, color="0.3")
        fig.get_layout_engine().set(rect=(0, 0.08, 1, 0.92))  # room for the note under the axes
    return fig, rec.frame()


def baselines_note(src: str | None, reference: pd.DataFrame | None, steps: tuple[int, ...] | None,
                   not_drawn: str = "", assumed: str = "") -> str:
    """What a steps figure says under its axes of the baselines it draws (which, from where) or
    cannot draw; '' when its paper version has none."""
    if src and reference is not None and not reference.empty:
        models = ", ".join(dict.fromkeys(reference["model"]))
        at = f" at {'/'.join(str(s) for s in steps)} steps" if steps else ""
        return (f"Baselines drawn (dashed, hollow): {models} — the paper's Table {src[1:]} values"
                f"{at}, as printed (not rerun here).{' ' + assumed if assumed else ''}")
    return not_drawn


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


def _baselines(inputs: FigureInputs, src: str, steps: tuple[int, ...] | None) -> pd.DataFrame:
    reference = baseline_points(inputs.points, src)
    if steps is not None and not reference.empty:
        reference = reference[reference["steps"].isin(steps)]
    return reference


# --------------------------------------------------------------------------------------------------
# Input CFG against BLEU / ROUGE-L (F17)
# --------------------------------------------------------------------------------------------------

def input_cfg_panels(inputs: FigureInputs):
    """Input CFG against BLEU (De-En) and ROUGE-L (XSum) (paper Fig. 17; T1 points hollow), each
    run beside its source-blind calibration where the aggregates carry it."""
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
        series = split_series(rows, "run", "input_cfg")
        colors = series_colors(series)
        for s in series:
            label = sweep_label("input_cfg")
            draw_series(ax, rec, panel, s, colors[s.name], "input_cfg", metric, label,
                        se_prefer="examples")
            draw_paper(ax, rec, panel, s, inputs.points, "input_cfg", metric, colors[s.name], label)
            draw_source_blind(ax, rec, panel, s, metric, colors[s.name])
        finish(ax, "input_cfg", metric, x_is_entropy=False)
    return fig, rec.frame()


def draw_source_blind(ax, rec: Recorder, panel: str, series, metric: str, color: str) -> None:
    """The series' source-blind calibration (``<metric>_source_blind``: its outputs scored against
    another example's reference, ``elf.evaluate.source_blind``), dotted, where the aggregates carry it."""
    column = f"{metric}_source_blind"
    if column not in series.rows.columns:
        return
    rows = series.rows[series.rows[column].notna()].sort_values("input_cfg")
    if rows.empty:
        return
    ax.plot(rows["input_cfg"], rows[column], linestyle=":", marker="x", color=color, alpha=0.7,
            label=f"{series.name}: source-blind")
    for _, row in rows.iterrows():
        rec.add(panel=panel, series=f"{series.name}: source-blind", source="calibration",
                run=row.get("run"), sampler=row.get("sampler"), input_cfg=row.get("input_cfg"),
                x_name="input_cfg", x=row["input_cfg"], y_name=column, y=row[column],
                label="source-blind")


# --------------------------------------------------------------------------------------------------
# Bars: the teaser (F1) and the training-token bars (F7c, F9b)
# --------------------------------------------------------------------------------------------------

OURS_COLOR, PAPER_BAR_COLOR, DISTILL_COLORS = "C0", "0.55", ("C2", "C1", "C4", "C3", "C5", "C6")
F1_BASELINES_NOT_STATED = (
    "Baseline bars of the paper's teaser (MDLM, Duo, FLM at 1024 steps without distillation; "
    "MDLM+SDTT, Duo+DCD, FMLM at 32 steps; LangFlow at 1024 steps): values not stated in the "
    "paper, so not drawn.")


def paper_t9_point(points: pd.DataFrame, steps: int) -> dict:
    """The paper's Table 9 Gen. PPL (and SE) of ELF-B at ``steps`` SDE steps ({} if absent)."""
    if points.empty:
        return {}
    rows = points[(points["src"] == "T9") & (points["metric"] == "gen_ppl")
                  & (points["steps"] == steps)]
    return rows.iloc[0].to_dict() if not rows.empty else {}


def teaser_bars(inputs: FigureInputs):
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


def token_bars(inputs: FigureInputs, paper_bars: tuple):
    """Training-token bars, base training and the distillation rounds on top: ours from the runs'
    metadata, the paper's ``paper_bars`` (its registry entry's: label, the Table 8 model of its
    base, the model whose total it is topped up to, or ``registry.PD_TOTAL``) from its Table 8 (paper
    Fig. 7c: ELF and the baselines; Fig. 9b: ELF+PD and the distilled baselines); ratios are × the
    paper's ELF-B."""
    pv = inputs.paper_values
    bars = [paper_token_bar(pv, label, base, total=paper_pd_tokens(pv)) if top == PD_TOTAL
            else paper_token_bar(pv, label, base, top) for label, base, top in paper_bars]
    return _token_figure(inputs, bars, paper_tokens(pv).get("ELF-B"))


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
