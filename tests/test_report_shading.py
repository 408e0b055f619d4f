"""Poor-quality shading relative to the Dataset line, the sweep note (F4) and the source-blind line
(F17) of the report's figures (elf/report/plotting.py, elf/report/templates.py)."""

import math

import pandas as pd
import pytest

from elf.report.plotting import (ENTROPY_MARGIN, PAPER_POOR, PPL_FACTOR, FigureInputs, poor_quality)
from elf.report.templates import frontier, input_cfg_panels, sweep_effect

SCORES = {"owt": {"metrics": {"gen_ppl": 20.0, "entropy": 3.9}, "path": "owt.json"}}


def points(w_values, ppl, entropy, se=0.5, **extra):
    return pd.DataFrame([dict(run="base", sampler=f"ode16_w{w}", method="ode", steps=16, gamma=0.0,
                              sc_cfg=w, dataset="owt", task="unconditional", model_size="tiny",
                              gen_ppl=p, gen_ppl_se=se, gen_ppl_n=6, entropy=h, entropy_se=0.01, entropy_n=6,
                              **extra)
                         for w, p, h in zip(w_values, ppl, entropy)])


def test_poor_quality_is_relative_to_the_dataset_line_else_the_papers():
    poor = poor_quality(points([1], [30], [3.5]), SCORES)
    assert poor.entropy == pytest.approx(3.9 - ENTROPY_MARGIN) and poor.gen_ppl == PPL_FACTOR * 20.0
    assert "Dataset" in poor.note and "3.60" in poor.note and "40.0" in poor.note
    assert poor_quality(points([1], [30], [3.5]), {}) == PAPER_POOR
    nan_scores = {"owt": {"metrics": {"gen_ppl": math.nan, "entropy": 3.9}}}
    assert poor_quality(points([1], [30], [3.5]), nan_scores) == PAPER_POOR


def test_sweep_effect_says_inert_when_no_end_moves_beyond_twice_the_combined_se():
    flat = sweep_effect(points([0.5, 3.0], [33.35, 32.71], [3.53, 3.53]), "model_size", "sc_cfg")
    # Gen. PPL −0.64 against 2·sqrt(0.5² + 0.5²) = 1.41; entropy 0 against 2·sqrt(2)·0.01 = 0.03
    assert "Gen. PPL -0.64, -2 % (2 SE 1.41: within noise)" in flat and "Entropy +0.00 (2 SE 0.03: within" in flat
    assert "inert" in flat
    moving = sweep_effect(points([0.5, 3.0], [104.3, 26.6], [5.51, 5.15]), "model_size", "sc_cfg")
    assert "beyond their noise in Gen. PPL and Entropy" in moving and "inert" not in moving
    # one metric beyond its noise, the other within: said per metric
    partial = sweep_effect(points([0.5, 3.0], [30.84, 28.03], [3.47, 3.46]), "model_size", "sc_cfg")
    assert "beyond their noise in Gen. PPL (not in Entropy)" in partial
    assert "Entropy -0.01 (2 SE 0.03: within noise)" in partial
    assert sweep_effect(points([1.0], [30], [3.5]), "model_size", "sc_cfg") == ""


def paper_sweep(ppl, entropy, model="ELF-B", method="ode", steps=64):
    return pd.DataFrame([dict(src="T10", entry=f"T10:{model}:{method}:{w}", model=model, paper_run="R01",
                              task=None, method=method, steps=steps, gamma=None, sc_cfg=w, input_cfg=None,
                              round=None, metric=metric, value=value, se=None)
                         for w, p, h in zip((0.5, 1.0, 3.0), ppl, entropy)
                         for metric, value in (("gen_ppl", p), ("entropy", h))])


def test_sweep_effect_sets_the_sweep_beside_the_papers_own():
    ours = points([0.5, 3.0], [36.5, 32.1], [3.52, 3.44], se=0.5)
    paper = paper_sweep([104.3, 80.0, 26.6], [5.51, 5.4, 5.15])
    weak = sweep_effect(ours, "model_size", "sc_cfg", paper=paper)
    # ours: 32.1 / 36.5 − 1 = −12 %; the paper's 26.6 / 104.3 − 1 = −74 %, entropy 5.15 − 5.51
    assert "Gen. PPL -4.40, -12 % (2 SE 1.41: beyond noise)" in weak
    assert ("the paper's ELF-B (64-step) sweep over the same ends moves Gen. PPL -74 % and entropy -0.36"
            in weak)
    assert "under half the paper's size (at most -12 % in Gen. PPL" in weak and "guidance.py" in weak
    strong = sweep_effect(points([0.5, 3.0], [104.0, 40.0], [5.5, 5.2]), "model_size", "sc_cfg", paper=paper)
    assert "-74 %" in strong and "under half" not in strong
    # the paper's values are read at our sweep's ends only: none at 2.5, so nothing is compared
    assert "paper's" not in sweep_effect(points([0.5, 2.5], [36.5, 32.1], [3.52, 3.44]), "model_size",
                                         "sc_cfg", paper=paper)


def test_frontier_caption_names_the_relative_shading_and_the_sweep():
    inputs = FigureInputs("F4", "t", points([0.5, 3.0], [33.3, 32.7], [3.53, 3.53]), pd.DataFrame(),
                          SCORES)
    fig, plotted = frontier(inputs, label_by="model_size", dataset_line=True, sweep_note=True)
    text = fig._supxlabel.get_text().replace("\n", " ")
    assert "relative to this corpus's Dataset line" in text and "inert" in text
    assert set(plotted["source"]) == {"ours", "dataset"}


def test_f17_draws_each_run_beside_its_source_blind_calibration():
    frame = pd.DataFrame([dict(run="wmt", sampler=f"cond_cfg{c}", method="ode", steps=16, gamma=0.0,
                               sc_cfg=1.0, input_cfg=float(c), task="translation", dataset="wmt",
                               bleu=10.0 * c, bleu_se=0.0, bleu_source_blind=1.0 + c)
                          for c in (1, 2)])
    _, plotted = input_cfg_panels(FigureInputs("F17", "t", frame, pd.DataFrame()))
    blind = plotted[plotted["source"] == "calibration"].set_index("x")["y"]
    assert blind.to_dict() == {1.0: 2.0, 2.0: 3.0}
    assert set(plotted[plotted["source"] == "ours"]["y"]) == {10.0, 20.0}
