"""The qualitative figures F8 (median example per task, with its own metrics) and F18 (trajectory), on
samples, scores and a trajectory written here in the formats of `elf sample`, `elf score` and
`elf trajectory`."""

from __future__ import annotations

import pandas as pd
import pytest

from elf.report.folders import EvalFolders
from elf import plan
from elf.validate import parse_experiment
from elf.artifacts.records import write_samples
from elf.io import write_json
from elf.artifacts import read_json
from elf.report.plotting import write_figure
from elf.report import registry
from elf.report.qualitative import draw_examples, draw_trajectory, load_qualitative, median_example

F8_NEEDS, F18_NEEDS = registry.needs("F8", "figure"), registry.needs("F18", "figure")
from elf.report.results import MissingInputError

PAPER = {"figures": [{"src": "F8", "per_example_metrics": {"uncond_gen_ppl": 20.9, "uncond_entropy": 5.2,
                                                            "translation_bleu": 71.2}}]}


def experiment():
    return parse_experiment({
        "scale": "embedded",
        "datasets": {"owt": {"task": "unconditional", "source": "embedded", "name": "owt", "max_length": 8},
                     "wmt": {"task": "translation", "source": "embedded", "name": "wmt", "subset": "de-en",
                             "max_length": 8, "max_input_length": 4}},
        "embeddings": {"encoder": {"kind": "encoder", "encoder": "main"}},
        "encoders": {"main": {"source": "build"}},
        "sizes": {"tiny": {"depth": 1, "width": 8, "heads": 1}},
        "run_defaults": {"dataset": "owt", "embedding": "encoder", "model": {"size": "tiny"}},
        "runs": {"base": {}, "wmt": {"dataset": "wmt"}},
        "samplers": {"ode": {"method": "ode", "steps": 4}},
        "evaluation": {"seeds": [3, 4]},
        "figures": {"F8": {"kind": "figure", "title": "examples", "runs": ["base", "wmt"], "samplers": ["ode"]},
                    "F18": {"kind": "figure", "title": "trajectory", "runs": ["base"], "samplers": ["ode"]}},
    })


def write_pair(root, run, task, texts, per_sample, seed=3):
    rows = [{"i": i, "text": t, "token_ids": [5]} for i, t in enumerate(texts)]
    if task != "unconditional":
        for row in rows:
            row.update(source=f"quelle {row['i']}", reference=f"reference {row['i']}")
    exp = experiment()
    write_samples(plan.samples_file(root, exp, run, "ode", seed), {"task": task, "seed": seed}, rows)
    write_json(plan.scores_file(root, exp, run, "ode", seed),
               {"metrics": {}, "per_sample": [{"i": i, **v} for i, v in enumerate(per_sample)]})


def test_median_example_by_hand():
    examples = [{"i": 0, "m": 9.0}, {"i": 1, "m": None}, {"i": 2, "m": 1.0}, {"i": 3, "m": 5.0},
                {"i": 4, "m": 7.0}]
    assert median_example(examples, "m")["i"] == 3          # of 1, 5, 7, 9: the lower middle, 5
    assert median_example(examples[:3], "m")["i"] == 2      # of 1, 9: 1
    with pytest.raises(ValueError, match="finite"):
        median_example([{"i": 0, "m": None}], "m")


def test_f8_shows_the_median_example_of_each_run_with_its_metrics(tmp_path):
    write_pair(tmp_path, "base", "unconditional", ["a b", "c d", "e f"],
               [{"gen_ppl": 30.0, "entropy": 1.0}, {"gen_ppl": 10.0, "entropy": 2.0},
                {"gen_ppl": 20.0, "entropy": 3.0}])
    write_pair(tmp_path, "wmt", "translation", ["x", "y"], [{"bleu": 50.0}, {"bleu": 40.0}])
    inputs = load_qualitative(experiment(), "F8", F8_NEEDS, EvalFolders.under(tmp_path), None)
    base, wmt = inputs["examples"]
    assert (base["i"], base["text"], base["metrics"]) == (2, "e f", {"gen_ppl": 20.0, "entropy": 3.0})
    assert (wmt["i"], wmt["source"], wmt["reference"]) == (1, "quelle 1", "reference 1")
    assert len(inputs["files"]) == 4 and all(len(f["sha256"]) == 64 for f in inputs["files"])
    fig, shown = draw_examples(inputs, PAPER)
    assert list(shown["metric"]) == ["gen_ppl", "entropy", "bleu"]
    assert list(shown["ours"]) == [20.0, 3.0, 40.0] and list(shown["paper"]) == [20.9, 5.2, 71.2]
    png, csv = write_figure("F8", fig, shown, tmp_path / "out")
    assert png.stat().st_size > 0 and pd.read_csv(csv)["text"].tolist() == ["e f", "e f", "y"]


def test_f8_refuses_missing_or_old_score_files(tmp_path):
    exp = experiment()
    with pytest.raises(MissingInputError, match="sample"):
        load_qualitative(exp, "F8", F8_NEEDS, EvalFolders.under(tmp_path), None)
    write_pair(tmp_path, "base", "unconditional", ["a"], [{"gen_ppl": 3.0, "entropy": 0.0}])
    write_pair(tmp_path, "wmt", "translation", ["x"], [{"bleu": 1.0}])
    path = plan.scores_file(tmp_path, experiment(), "wmt", "ode", 3)
    write_json(path, {"metrics": {}})  # written before scores carried per-sample values
    with pytest.raises(MissingInputError, match="per-sample"):
        load_qualitative(exp, "F8", F8_NEEDS, EvalFolders.under(tmp_path), None)
    write_pair(tmp_path, "wmt", "translation", ["x"], [{"bleu": None}])  # nothing scored
    with pytest.raises(MissingInputError, match="seed3.json: no example has a finite bleu"):
        load_qualitative(exp, "F8", F8_NEEDS, EvalFolders.under(tmp_path), None)


def test_f18_lists_every_recorded_step_of_sequence_0(tmp_path):
    steps = [{"t": t, "step": k, "state": "x_hat" if t < 1 else "final", "texts": [f"text {k}", "other"],
              "token_ids": [[1], [2]]} for k, t in enumerate((0.0, 0.5, 1.0))]
    write_json(tmp_path / "trajectories" / "base" / "ode.json", {"provenance": {"seed": 3}, "steps": steps})
    inputs = load_qualitative(experiment(), "F18", F18_NEEDS, EvalFolders.of(()), tmp_path / "trajectories")
    fig, shown = draw_trajectory(inputs, {})
    assert shown["text"].tolist() == ["text 0", "text 1", "text 2"]
    assert shown["t"].tolist() == [0.0, 0.5, 1.0] and shown["state"].iloc[-1] == "final"
    assert read_json(inputs["files"][0]["path"])["steps"] == steps
    with pytest.raises(MissingInputError, match="trajectory"):
        load_qualitative(experiment(), "F18", F18_NEEDS, EvalFolders.of(()), tmp_path / "elsewhere")


def _text_inside_figure(fig) -> bool:
    """Whether every drawn text (titles included) lies within the rendered figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig.bbox
    renderer = canvas.get_renderer()
    texts = [t for ax in fig.axes for t in (*ax.texts, ax.title, ax._left_title) if t.get_text()]
    return bool(texts) and all(
        box.x0 - 1 <= b.x0 and b.x1 <= box.x1 + 1 and box.y0 - 1 <= b.y0 and b.y1 <= box.y1 + 1
        for b in (t.get_window_extent(renderer) for t in texts))


def test_paper_length_texts_are_cut_to_fit_and_kept_whole_in_the_csv(tmp_path):
    long_text = " ".join(f"word{k}" for k in range(900))  # ~1024 tokens' worth of text
    write_pair(tmp_path, "base", "unconditional", [long_text, long_text],
               [{"gen_ppl": 3.0, "entropy": 1.0}, {"gen_ppl": 4.0, "entropy": 1.0}])
    write_pair(tmp_path, "wmt", "translation", [long_text], [{"bleu": 1.0}])
    inputs = load_qualitative(experiment(), "F8", F8_NEEDS, EvalFolders.under(tmp_path), None)
    fig, shown = draw_examples(inputs, PAPER)
    assert _text_inside_figure(fig)
    drawn = fig.axes[0].texts[0].get_text().splitlines()
    assert len(drawn) == 6 and drawn[-1].strip().startswith("… (") and "more characters" in drawn[-1]
    assert fig.get_size_inches()[1] < 5 and shown["text"].iloc[0] == long_text
    steps = [{"t": k / 15, "step": k, "state": "x_hat", "texts": [long_text], "token_ids": [[1]]}
             for k in range(16)]
    write_json(tmp_path / "trajectories" / "base" / "ode.json", {"provenance": {"seed": 3}, "steps": steps})
    inputs = load_qualitative(experiment(), "F18", F18_NEEDS, EvalFolders.of(()), tmp_path / "trajectories")
    fig, shown = draw_trajectory(inputs, {})
    assert _text_inside_figure(fig)
    drawn = fig.axes[0].texts[0].get_text().splitlines()
    assert [line[:6] for line in drawn[::3]] == [f"t={k / 15:.2f}"[:6] for k in range(16)]
    assert shown["text"].tolist() == [long_text] * 16
