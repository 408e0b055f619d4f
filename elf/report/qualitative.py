"""The paper's qualitative figures: F8 (one example per task with its own metrics) and F18 (the decoded
denoising trajectory), drawn as text panels, each with a CSV of exactly what is shown.

Reads (never writes):
- F8: for each (run, sampler) of the figure, the first evaluation seed's samples file and its score
  file in the evaluation folder given that holds the pair (``elf evaluate``; found by
  ``elf.report.folders``; the score's ``per_sample`` holds each sample's
  Gen. PPL and entropy, sentence BLEU, or ROUGE). The example shown is the **median** one by the
  task's metric (Gen. PPL, BLEU, ROUGE-L): representative rather than the best, a choice of ours —
  the paper does not say how it picked its examples (its F8 numbers are shown beside ours);
- F18: ``<trajectories_root>/<run>/<sampler>.json`` (``elf trajectory``): sequence 0's decoded x̂ at
  each recorded time.

    shown = load_qualitative(exp, "F8", registry.needs("F8", "figure"), folders, trajectories_root)
    fig, points = draw_examples(shown, paper_values)

Which of the two an id reads is its registry entry's ``needs`` (``samples`` or ``trajectory``). Each
text block is cut to a few lines (``EXAMPLE_LINES``, ``STEP_LINES``: a paper-scale sample of 1024
tokens is ~50 wrapped lines) and the figure sized to what is shown; its CSV holds every text whole.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from elf.pairs import Needs
from elf.artifacts.layout import trajectory_path
from elf.artifacts.names import PER_SAMPLE
from elf.artifacts.records import read_samples
from elf.config import Experiment
from elf.artifacts import file_sha256, read_json
from elf.report.plotting import FigureInputs
from elf.report.folders import EvalFolders
from elf.report.results import MissingInputError, figure_pairs

MAIN_METRIC = {"unconditional": "gen_ppl", "translation": "bleu", "summarization": "rougeL"}
SHOWN_METRICS = {"unconditional": ("gen_ppl", "entropy"), "translation": ("bleu",),
                 "summarization": ("rouge1", "rouge2", "rougeL")}
PAPER_KEYS = {"gen_ppl": "uncond_gen_ppl", "entropy": "uncond_entropy", "bleu": "translation_bleu",
              "rouge1": "summarization_rouge1", "rouge2": "summarization_rouge2",
              "rougeL": "summarization_rougeL"}
WRAP = 110  # characters per line in the panels
EXAMPLE_LINES = 6  # lines shown of each F8 text block (a 1024-token sample is ~50): the CSV has it whole
STEP_LINES = 3  # lines shown of each F18 step
LINE_IN = 0.115  # inches per line of the panels' 6.5 pt monospace text (1.2 line spacing + margin)


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------

def _need(path: Path, rule: str) -> Path:
    if not path.exists():
        raise MissingInputError(f"missing {path}: it is made by {rule}")
    return path


def median_example(per_sample: list[dict], metric: str) -> dict:
    """The example whose ``metric`` is the median of the examples that have one (the lower middle
    for an even count; ties keep file order)."""
    scored = [e for e in per_sample if e.get(metric) is not None and math.isfinite(e[metric])]
    if not scored:
        raise ValueError(f"no example has a finite {metric}")
    ranked = sorted(scored, key=lambda e: e[metric])
    return ranked[(len(ranked) - 1) // 2]


def load_examples(exp: Experiment, figure_id: str, folders: EvalFolders) -> list[dict]:
    """F8: the median example of each (run, sampler), with its text, metrics and the files read."""
    seed = exp.evaluation.seeds[0]
    examples = []
    for run, sampler in figure_pairs(exp, figure_id):
        made_by = f"the `evaluate` rule (run {run}, sampler {sampler})"
        samples_path = _need(folders.samples(run, sampler, seed), made_by)
        scores_path = _need(folders.scores(run, sampler, seed), made_by)
        header, rows = read_samples(samples_path)
        score = read_json(scores_path)
        task = header.get("task", "unconditional")
        if PER_SAMPLE not in score:
            raise MissingInputError(f"{scores_path} has no per-sample values: rerun the `evaluate` rule")
        try:
            chosen = median_example(score[PER_SAMPLE], MAIN_METRIC[task])
        except ValueError as err:  # e.g. every sample empty: nothing to show
            raise MissingInputError(f"{scores_path}: {err}; F8 has no example to show") from None
        row = next(r for r in rows if r.get("i") == chosen["i"])
        examples.append(dict(
            run=run, sampler=sampler, seed=seed, task=task, i=chosen["i"], text=row["text"],
            source=row.get("source"), reference=row.get("reference"),
            metrics={m: chosen.get(m) for m in SHOWN_METRICS[task]},
            n_examples=len(score[PER_SAMPLE]),
            files=[{"path": str(samples_path), "sha256": file_sha256(samples_path)},
                   {"path": str(scores_path), "sha256": file_sha256(scores_path)}]))
    return examples


def load_trajectory(exp: Experiment, figure_id: str, trajectories_root: str | Path) -> dict:
    """F18: the trajectory file of the figure's first (run, sampler)."""
    run, sampler = figure_pairs(exp, figure_id)[0]
    path = _need(trajectory_path(trajectories_root, run, sampler),
                 f"the `trajectory` rule (run {run}, sampler {sampler})")
    return dict(run=run, sampler=sampler, blob=read_json(path),
                files=[{"path": str(path), "sha256": file_sha256(path)}])


def load_qualitative(exp: Experiment, figure_id: str, needs: Needs, folders: EvalFolders,
                     trajectories_root) -> dict:
    """What a qualitative figure reads (by its registry ``needs``: samples, as F8, or a trajectory, as
    F18): ``{"examples" | "trajectory": ..., "files": [{"path", "sha256"}]}``."""
    if needs.samples:
        examples = load_examples(exp, figure_id, folders)
        return {"examples": examples, "files": [f for e in examples for f in e["files"]]}
    if not trajectories_root:
        raise MissingInputError(f"{figure_id} reads a trajectory: pass --trajectories-root")
    trajectory = load_trajectory(exp, figure_id, trajectories_root)
    return {"trajectory": trajectory, "files": trajectory["files"]}


# --------------------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------------------

def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def clipped_lines(label: str, text: str | None, max_lines: int) -> list[str]:
    """``label: text`` wrapped to ``WRAP`` characters, cut to ``max_lines`` lines; a cut block's last line
    says how many characters are not shown (the figure's CSV holds the whole text)."""
    wrapped = textwrap.wrap(text or "(empty)", WRAP - len(label) - 2) or ["(empty)"]
    if len(wrapped) > max_lines:
        hidden = len(text) - len(" ".join(wrapped[:max_lines - 1]))
        wrapped = wrapped[:max_lines - 1] + [f"… ({hidden} more characters in the CSV)"]
    return [f"{label}: {wrapped[0]}"] + [" " * (len(label) + 2) + w for w in wrapped[1:]]


def _text_panel(ax, title: str, lines: list[str]) -> None:
    """Text lines top to bottom in an axis without frame."""
    ax.axis("off")
    ax.set_title(title, loc="left", fontsize=8, fontweight="bold")
    ax.text(0, 1, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=6.5,
            transform=ax.transAxes)


def examples_panels(inputs: FigureInputs) -> tuple[Figure, pd.DataFrame]:
    """The registry's template for F8 (``draw_examples`` of what the figure reads)."""
    return draw_examples(inputs.shown, inputs.paper_values)


def trajectory_text(inputs: FigureInputs) -> tuple[Figure, pd.DataFrame]:
    """The registry's template for F18 (``draw_trajectory`` of what the figure reads)."""
    return draw_trajectory(inputs.shown, inputs.paper_values)


def _example_lines(ex: dict) -> list[str]:
    """The shown lines of one F8 example: its source (conditional tasks), ELF's text, its reference."""
    blocks = [("source", ex["source"])] if ex["source"] is not None else []
    blocks.append(("ELF", ex["text"]))
    if ex["reference"] is not None:
        blocks.append(("reference", ex["reference"]))
    return [line for label, text in blocks for line in clipped_lines(label, text, EXAMPLE_LINES)]


def draw_examples(inputs: dict, paper_values: dict) -> tuple[Figure, pd.DataFrame]:
    """One example per task (run) with its own metrics, beside the numbers of the paper's F8."""
    paper = next((f.get("per_example_metrics", {}) for f in paper_values.get("figures", [])
                  if f.get("src") == "F8"), {})
    examples = inputs["examples"]
    panel_lines = [_example_lines(ex) for ex in examples]
    heights = [LINE_IN * (len(lines) + 4) for lines in panel_lines]  # + the two-line title and gaps
    fig = Figure(figsize=(9, sum(heights) + 0.3))
    axes = fig.subplots(len(examples), 1, squeeze=False, height_ratios=heights)[:, 0]
    rows = []
    for ax, ex, lines in zip(axes, examples, panel_lines):
        ours = ", ".join(f"{m} {_fmt(v)}" for m, v in ex["metrics"].items())
        theirs = ", ".join(f"{m} {_fmt(paper.get(PAPER_KEYS[m]))}" for m in ex["metrics"])
        title = (f"{ex['task']} — run {ex['run']}, sampler {ex['sampler']}, seed {ex['seed']}, "
                 f"sample {ex['i']} (median {MAIN_METRIC[ex['task']]} of {ex['n_examples']})\n"
                 f"ours: {ours}   |   the paper's example: {theirs}")
        _text_panel(ax, title, lines)
        for metric, value in ex["metrics"].items():
            rows.append(dict(task=ex["task"], run=ex["run"], sampler=ex["sampler"], seed=ex["seed"],
                             i=ex["i"], metric=metric, ours=value,
                             paper=paper.get(PAPER_KEYS[metric]), text=ex["text"],
                             source=ex["source"], reference=ex["reference"]))
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


def draw_trajectory(inputs: dict, paper_values: dict) -> tuple[Figure, pd.DataFrame]:
    """Sequence 0's decoded x̂ from t = 0 to t = 1 (the final state), one line per recorded step."""
    trajectory = inputs["trajectory"]
    steps = trajectory["blob"]["steps"]
    lines = [line for s in steps for line in clipped_lines(f"t={s['t']:.2f}", s["texts"][0], STEP_LINES)]
    fig = Figure(figsize=(9, LINE_IN * (len(lines) + 2) + 0.5))
    ax = fig.subplots()
    title = (f"Denoising trajectory — run {trajectory['run']}, sampler {trajectory['sampler']}, "
             f"seed {trajectory['blob']['provenance'].get('seed')}, sequence 0")
    _text_panel(ax, title, lines)
    rows = [dict(run=trajectory["run"], sampler=trajectory["sampler"], step=s["step"], t=s["t"],
                 state=s["state"], text=s["texts"][0]) for s in steps]
    fig.tight_layout()
    return fig, pd.DataFrame(rows)

