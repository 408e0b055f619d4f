"""Tests of the report layer: figures, tables, replication review, manifest and the `elf report` stage.

A small experiment (``parse_experiment``) and synthetic aggregate files in ``tmp_path`` stand in for
the pipeline's outputs; the paper's values are the project's copy (``config/paper_values.yaml``).
Run: ``python -m pytest tests/test_report.py -q``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from elf.report.folders import EvalFolders
from elf.artifacts.layout import eval_dirs_under
from elf import plan
from elf.cli import main as elf_main
from elf.validate import parse_experiment
from elf.report import cells, registry, review
from elf.report.cells import TableInputs
from elf.report.paper import load_paper_values, match_paper, paper_points
from elf.report.plotting import FigureInputs
from elf.report.render import draw, render_figure, render_table
from elf.report.results import MissingInputError, all_pairs, figure_frame, load_rows

PAPER_VALUES = Path(__file__).resolve().parent.parent / "config" / "paper_values.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def sampler(method="ode", steps=64, gamma=0.0, sc_cfg=1.0, **extra):
    return {"method": method, "steps": steps, "gamma": gamma, "sc_cfg": sc_cfg, **extra}


SAMPLERS = {
    "ode64_w1": sampler(sc_cfg=1.0), "ode64_w3": sampler(sc_cfg=3.0),
    "sde64_w1": sampler("sde", gamma=1.0, sc_cfg=1.0), "sde64_w3": sampler("sde", gamma=1.0, sc_cfg=3.0),
    "ode8_w1": sampler(steps=8), "sde8_w1": sampler("sde", steps=8, gamma=1.0),
    "ode8_uniform": sampler(steps=8, grid="uniform"), "ode64_uniform": sampler(grid="uniform"),
    "sde8_t9": sampler("sde", steps=8, gamma=2.0, sc_cfg=3.0),
    "sde16_t9": sampler("sde", steps=16, gamma=2.0, sc_cfg=3.0),
    "sde64_g0": sampler("sde", gamma=0.0), "sde64_g2": sampler("sde", gamma=2.0),
    "pd1": sampler("sde", steps=1, gamma=1.5, sc_cfg=2.5),
    "pd2": sampler("sde", steps=2, gamma=1.5, sc_cfg=2.5),
    "cond_c1": sampler(input_cfg=1.0), "cond_c2": sampler(input_cfg=2.0),
}


def fig(kind, runs, samplers, title="t"):
    return {"kind": kind, "title": title, "runs": runs, "samplers": samplers}


FRONTIER = ["ode64_w1", "ode64_w3"]
BOTH = ["ode64_w1", "ode64_w3", "sde64_w1", "sde64_w3"]
FIGURE_SPECS = {
    "F4": fig("figure", ["R01"], FRONTIER), "F5a": fig("figure", ["R01", "R09"], FRONTIER),
    "F5b": fig("figure", ["R01"], FRONTIER), "F5c": fig("figure", ["R01"], ["ode8_w1", "ode64_w1",
                                                                         "sde8_w1", "sde64_w1"]),
    "F6": fig("figure", ["R01", "R02"], BOTH), "F7a": fig("figure", ["R01"], ["sde8_t9", "sde16_t9"]),
    "F7b": fig("figure", ["R01"], ["sde8_t9", "sde16_t9"]),
    "F9a": fig("figure", ["R31"], ["pd1", "pd2"]),
    "F9c": fig("figure", ["R31"], ["pd1", "pd2"]), "F11": fig("figure", ["R01", "R09"], FRONTIER),
    "F12": fig("figure", ["R01", "R24"], BOTH), "F13": fig("figure", ["R01"], BOTH),
    "F14": fig("figure", ["R01"], BOTH), "F15": fig("figure", ["R01"], BOTH),
    "F16a": fig("figure", ["R01"], ["ode8_w1", "ode64_w1", "ode8_uniform", "ode64_uniform"]),
    "F16b": fig("figure", ["R01"], ["sde64_g0", "sde64_w1", "sde64_g2"]),
    "F17": fig("figure", ["R04", "R05"], ["cond_c1", "cond_c2"]),
    "F99": fig("figure", ["R01"], FRONTIER),
    "T1": fig("table", ["R04", "R05"], ["cond_c2"]), "T3": fig("table", ["R30", "R31"], []),
    "T4": fig("table", ["R31"], ["pd1", "pd2"]), "T5": fig("table", ["R30", "R31"], ["pd1", "pd2"]),
    "T9": fig("table", ["R01"], ["sde8_t9", "sde16_t9"]), "T10": fig("table", ["R01", "R02"], BOTH),
    "T99": fig("table", ["R01"], FRONTIER),
}


def make_config(scale="embedded") -> dict:
    distill = lambda s, t: {"student_steps": s, "teacher_substeps": t}  # noqa: E731
    return {
        "scale": scale,
        "datasets": {"owt": {"task": "unconditional", "source": "embedded", "name": "owt"},
                     "deen": {"task": "translation", "source": "embedded", "name": "deen",
                              "max_length": 128, "max_input_length": 64},
                     "xsum": {"task": "summarization", "source": "embedded", "name": "xsum",
                              "max_length": 1088, "max_input_length": 1024}},
        "encoders": {"main": {"d_model": 64}},
        "embeddings": {"encoder": {"encoder": "main"}, "gauss": {"kind": "gaussian",
                                                                 "encoder": "main"}},
        "runs": {
            "R01": {"dataset": "owt", "paper_run": "R01"},
            "R02": {"dataset": "owt", "paper_run": "R02", "model": {"size": "ELF-M"}},
            "R09": {"dataset": "owt", "embedding": "gauss", "paper_run": "R09",
                    "model": {"prediction": "v"}},
            "R24": {"dataset": "owt", "paper_run": "R24", "model": {"bottleneck": 32}},
            "R04": {"dataset": "deen", "paper_run": "R04"},
            "R05": {"dataset": "xsum", "paper_run": "R05"},
            "R30": {"dataset": "owt", "kind": "distill", "teacher": "R01", "init_from": "R01",
                    "distill": distill(16, 4), "paper_run": "R30"},
            "R31": {"dataset": "owt", "kind": "distill", "teacher": "R01", "init_from": "R30",
                    "distill": distill(8, 8), "paper_run": "R31"},
        },
        "samplers": SAMPLERS,
        "figures": FIGURE_SPECS,
    }


RUN_OFFSET = {"R01": 0.0, "R02": 7.0, "R09": 30.0, "R24": 12.0, "R30": 50.0, "R31": 20.0}


def synthetic_metrics(run: str, name: str) -> dict:
    """Deterministic numbers: Gen. PPL falls with SC-CFG and steps; SDE is 10 lower than ODE."""
    s = SAMPLERS[name]
    if run == "R04":
        return {"bleu": {"mean": 20.0 + s.get("input_cfg", 1.0), "se": 0.5, "n": 2}}
    if run == "R05":
        base = 25.0 + s.get("input_cfg", 1.0)
        one_seed = {"se": 0.0, "n": 1, "se_note": "one seed only"}  # as `elf aggregate` writes
        return {"rouge1": {"mean": base + 8, **one_seed},
                "rouge2": {"mean": base - 15, **one_seed},
                "rougeL": {"mean": base, **one_seed, "se_examples": 0.12},
                "rougeL_se": {"mean": 0.12, **one_seed}}
    ppl = 40.0 / s["sc_cfg"] + 320.0 / s["steps"] + RUN_OFFSET[run] \
        - (10.0 if s["method"] == "sde" else 0.0) + 5.0 * s["gamma"] \
        + (3.0 if s.get("grid") == "uniform" else 0.0)
    entropy = 5.6 - 0.1 * s["sc_cfg"] - 0.01 * s["steps"] / 8
    return {"gen_ppl": {"mean": ppl, "se": 0.8, "n": 6, "per_seed": {"0": ppl}},
            "entropy": {"mean": entropy, "se": 0.01, "n": 6},
            "n_empty": {"mean": 0.0, "se": 0.0, "n": 6}}


def write_aggregates(root: Path, config: dict) -> None:
    exp = parse_experiment(config)
    for run, name in all_pairs(exp):
        path = plan.aggregate_path(root, exp, run, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "provenance": {"scores": [{"path": f"scores/{run}/{name}/seed0.json", "sha256": "ab"}]},
            "run": run, "sampler": name, "metrics": synthetic_metrics(run, name)}))


@pytest.fixture
def setup(tmp_path):
    config = make_config()
    exp = parse_experiment(config)
    aggregates = tmp_path / "evals"
    write_aggregates(aggregates, config)
    datasets = tmp_path / "dataset_scores"
    datasets.mkdir()
    (datasets / "owt.json").write_text(json.dumps({"provenance": {}, "metrics": {
        "gen_ppl": 14.5, "entropy": 5.45}}))
    paper_values = load_paper_values(PAPER_VALUES)
    return {"tmp": tmp_path, "config": config, "exp": exp, "aggregates": aggregates,
            "datasets": datasets, "paper_values": paper_values,
            "points": paper_points(paper_values)}


def figure_inputs(setup, figure_id):
    frame = figure_frame(setup["exp"], figure_id, EvalFolders.under(setup["aggregates"]))
    scores = {"owt": {"metrics": {"gen_ppl": 14.5, "entropy": 5.45}, "path": "owt.json"}}
    return frame, FigureInputs(figure_id, "title", frame, setup["points"], scores)


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------

def test_frame_has_settings_metrics_and_paths(setup):
    frame = figure_frame(setup["exp"], "F6", EvalFolders.under(setup["aggregates"]))
    assert len(frame) == 8
    row = frame[(frame["run"] == "R02") & (frame["sampler"] == "sde64_w3")].iloc[0]
    assert (row["paper_run"], row["method"], row["steps"], row["gamma"], row["sc_cfg"]) == \
        ("R02", "sde", 64, 1.0, 3.0)
    assert row["gen_ppl"] == pytest.approx(40 / 3 + 5 + 7 - 10 + 5)
    assert row["gen_ppl_se"] == 0.8 and row["entropy_se"] == 0.01
    assert row["aggregate_path"].endswith("R02/sde64_w3/aggregates/sde64_w3.json")
    summ = figure_frame(setup["exp"], "T1", EvalFolders.under(setup["aggregates"]))
    xsum = summ[summ["run"] == "R05"].iloc[0]
    assert xsum["rougeL_example_se"] == 0.12 and xsum["rougeL_se"] == 0.0
    assert "rougeL_se_n" not in xsum  # a per-example SE metric is not a metric of its own


def test_missing_aggregate_names_file_and_rule(setup):
    plan.aggregate_path(setup["aggregates"], setup["exp"], "R02", "sde64_w3").unlink()
    with pytest.raises(MissingInputError) as err:
        figure_frame(setup["exp"], "F6", EvalFolders.under(setup["aggregates"]))
    assert "R02/sde64_w3/aggregates/sde64_w3.json" in str(err.value) and "aggregate" in str(err.value)


def test_a_figure_reads_only_the_folders_it_is_given(setup):
    """The report finds each pair's aggregate in the folders passed (its rule's inputs), not through
    the plan: a run whose folders are left out is named, and an aggregate copied into another pair's
    place is refused."""
    exp, root = setup["exp"], setup["aggregates"]
    pairs = plan.figure_pairs(exp, "F6")
    given = [plan.pair_dir(root, exp, run, sampler) for run, sampler in pairs]
    assert len(figure_frame(exp, "F6", EvalFolders.of(given))) == len(pairs)
    left_out = [f for f in given if f.parent.name != "R02"]
    with pytest.raises(MissingInputError, match="no folder of run R02 was given"):
        figure_frame(exp, "F6", EvalFolders.of(left_out))
    (run_a, sampler_a), (run_b, sampler_b) = pairs[0], next(p for p in pairs if p[0] != pairs[0][0])
    target = plan.aggregate_path(root, exp, run_b, sampler_b)
    target.write_text(plan.aggregate_path(root, exp, run_a, sampler_a).read_text())
    with pytest.raises(MissingInputError, match=f"aggregate of run {run_a}, sampler {sampler_a}, "
                                                f"not of run {run_b}"):
        figure_frame(exp, "F6", EvalFolders.of(given))


def test_paper_matching_rule(setup):
    frame = figure_frame(setup["exp"], "F6", EvalFolders.under(setup["aggregates"]))
    matches = match_paper(frame, setup["points"])
    ode_w1 = frame.index[(frame["run"] == "R01") & (frame["sampler"] == "ode64_w1")][0]
    got = matches[matches["row_index"] == ode_w1].set_index("metric")["value"]
    assert got["gen_ppl"] == 65.30 and got["entropy"] == 5.40  # T10 ELF-B ODE SC-CFG 1
    sde_w3 = frame.index[(frame["run"] == "R02") & (frame["sampler"] == "sde64_w3")][0]
    got = matches[matches["row_index"] == sde_w3].set_index("metric")["value"]
    assert got["gen_ppl"] == 21.69  # T10 ELF-M SDE γ=1 SC-CFG 3
    uniform = figure_frame(setup["exp"], "F16a", EvalFolders.under(setup["aggregates"]))
    assert match_paper(uniform[uniform["grid"] == "uniform"], setup["points"]).empty


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------

# Bar figures (F1 teaser, F7c/F9b token bars) have their own tests in tests/test_report_static.py.
BAR_FIGURES = ("F1", "F7c", "F9b")


# The qualitative figures (F8 samples, F18 a trajectory) have theirs in tests/test_qualitative.py.
QUALITATIVE = tuple(f for f, e in registry.FIGURES.items() if e.needs.samples or e.needs.trajectory)


@pytest.mark.parametrize("figure_id", [*(f for f in registry.FIGURES
                                         if f not in BAR_FIGURES + QUALITATIVE), "F99"])
def test_figure_writes_png_and_csv_of_the_inputs(setup, figure_id):
    frame, inputs = figure_inputs(setup, figure_id)
    png, csv = render_figure(figure_id, inputs, setup["tmp"] / "figs", dpi=40)
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 2000
    plotted = pd.read_csv(csv)
    ours = plotted[plotted["source"] == "ours"]
    assert not ours.empty
    for _, point in ours.iterrows():
        row = frame[(frame["run"] == point["run"]) & (frame["sampler"] == point["sampler"])].iloc[0]
        assert point["y"] == pytest.approx(row[point["y_name"]])
        assert point["x"] == pytest.approx(row[point["x_name"]])
    expected = frame[frame["gen_ppl"].notna()] if "gen_ppl" in frame else frame
    if figure_id == "F9c":  # the paper keeps only good entropy: here above Dataset (5.45) − 0.3
        expected = expected[expected["entropy"] > 5.45 - 0.3]
    if figure_id == "F17":
        expected = frame
    assert len(ours) == len(expected)


def test_frontier_draws_paper_values_as_reference(setup):
    _, inputs = figure_inputs(setup, "F4")
    _, plotted = draw("F4", "figure", inputs)
    paper = plotted[plotted["source"] == "paper"].set_index("sc_cfg")
    assert paper.loc[1.0, "y"] == 65.30 and paper.loc[1.0, "x"] == 5.40
    assert paper.loc[3.0, "y"] == 26.62 and paper.loc[3.0, "x"] == 5.15


def test_steps_figures_have_dataset_line_and_baselines(setup):
    _, inputs = figure_inputs(setup, "F7b")
    _, plotted = draw("F7b", "figure", inputs)
    dataset = plotted[plotted["source"] == "dataset"]
    assert list(dataset["y"]) == [14.5]
    baselines = plotted[plotted["source"] == "paper-baseline"]
    sdtt = baselines[baselines["series"] == "MDLM+SDTT (paper)"].set_index("x")["y"]
    assert sdtt.to_dict() == {8: 112.66, 16: 57.74, 32: 40.41}  # T4 rows at 8/16/32 steps
    t9 = plotted[plotted["source"] == "paper"].set_index("steps")["y"]
    assert t9.to_dict() == {8: 67.32, 16: 33.66}


def test_steps_figures_say_which_baselines_they_draw(setup):
    fig, _ = draw("F7b", "figure", figure_inputs(setup, "F7b")[1])
    note = " ".join(t.get_text() for t in fig.texts)
    assert "Baselines drawn (dashed, hollow): MDLM+SDTT, Duo+DCD, FMLM — the paper's Table 4 values " \
           "at 8/16/32 steps" in note and "assumed to be Table 4's" in note
    fig, _ = draw("F7a", "figure", figure_inputs(setup, "F7a")[1])
    assert "Baselines not drawn" in " ".join(t.get_text() for t in fig.texts)
    fig, _ = draw("F5c", "figure", figure_inputs(setup, "F5c")[1])
    assert "Baselines" not in " ".join(t.get_text() for t in fig.texts)   # the paper's F5c has none


def test_f17_panels_use_bleu_and_rouge(setup):
    _, inputs = figure_inputs(setup, "F17")
    _, plotted = draw("F17", "figure", inputs)
    ours = plotted[plotted["source"] == "ours"]
    assert set(ours["y_name"]) == {"bleu", "rougeL"}
    bleu = ours[ours["y_name"] == "bleu"].set_index("x")["y"]
    assert bleu.to_dict() == {1.0: 21.0, 2.0: 22.0}
    rouge_se = ours[ours["y_name"] == "rougeL"]["y_se"]
    assert list(rouge_se) == [0.12, 0.12]  # per-example SE when there is one seed


# --------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------

def table_of(setup, table_id):
    frame = figure_frame(setup["exp"], table_id, EvalFolders.under(setup["aggregates"]))
    inputs = TableInputs(table_id, "title", frame, setup["points"], setup["exp"],
                                setup["paper_values"])
    paths = render_table(table_id, inputs, setup["tmp"] / "tables")
    return {p.suffix: p.read_text() for p in paths}


def test_fmt_pm_by_hand():
    assert cells.fmt_pm(30.123, 1.456) == "30.12 ± 1.46"
    assert cells.fmt_pm(5.15, 0.002) == "5.15 ± 0.002"
    assert cells.fmt_pm(7.0) == "7.00"
    assert cells.fmt_pm(None, 1.0) == cells.DASH


def test_t9_mean_se_and_paper(setup):
    md = table_of(setup, "T9")[".md"]
    ppl8 = 40 / 3 + 320 / 8 - 10 + 10  # sde8_t9: SC-CFG 3, 8 steps, SDE, γ=2
    assert f"{ppl8:.2f} ± 0.80" in md
    assert f"{5.6 - 0.3 - 0.01:.2f} ± 0.01" in md
    assert "67.32 ± 2.25" in md and "5.14 ± 0.085" in md
    assert "24.08 ± 0.16" in md  # the 32-step paper row we did not run is still shown


def test_t10_t1_t3_t4_t5_layouts(setup):
    t10 = table_of(setup, "T10")
    assert "(65.30)" in t10[".md"] and "(21.69)" in t10[".md"]
    assert f"{40 + 5:.2f} ± 0.80 (65.30)" in t10[".md"]
    assert "\\pm" in t10[".tex"] and "\\toprule" in t10[".tex"]
    t1 = table_of(setup, "T1")[".md"]
    assert "30.50 ± 0.13" in t1 and "27.80 ± 0.12" in t1  # AR ROUGE-1, ELF-B ROUGE-L (paper)
    assert "22.00 ± 0.50" in t1 and "27.00 ± 0.12" in t1  # ours: BLEU (2 seeds), ROUGE-L
    t3 = table_of(setup, "T3")[".md"]
    assert "| 1 | R30 | R30 | 16 | 4 | 64 | R01 | R01 | 16 | 4 |" in t3
    assert "| 2 | R31 | R31 | 8 | 8 | 64 | R01 | R30 | 8 | 8 |" in t3
    t4 = table_of(setup, "T4")[".md"]
    assert "1260.60 / 5.26" in t4 and "136.10 / 5.26" in t4
    t5 = table_of(setup, "T5")[".md"]
    assert "4.90 / 1.72*" in t5  # paper r1 at 1 step, degenerate
    t99 = table_of(setup, "T99")
    assert "65.3" in t99[".md"] and t99[".csv"].startswith("Run,")


# --------------------------------------------------------------------------------------------------
# Review
# --------------------------------------------------------------------------------------------------

def test_compare_judges_paper_values_on_made_numbers(setup):
    frame = figure_frame(setup["exp"], "T9", EvalFolders.under(setup["aggregates"]))
    frame.loc[frame["sampler"] == "sde8_t9", ["gen_ppl", "gen_ppl_se"]] = [67.32 + 5.0, 1.0]
    frame.loc[frame["sampler"] == "sde16_t9", ["gen_ppl", "gen_ppl_se"]] = [33.66 + 3.0, 1.0]
    result = review.compare(frame, setup["points"]).set_index(["sampler", "metric"])
    # band 2·sqrt(2.25² + 1²) = 4.925 < 5.0 → inconsistent; 2·sqrt(1.09² + 1²) = 2.958 < 3.0 → too
    assert result.loc[("sde8_t9", "gen_ppl"), "verdict"] == "inconsistent"
    assert result.loc[("sde8_t9", "gen_ppl"), "combined_se"] == pytest.approx(math.hypot(2.25, 1))
    assert result.loc[("sde8_t9", "gen_ppl"), "paper_se_basis"] == "printed"
    assert result.loc[("sde16_t9", "gen_ppl"), "verdict"] == "inconsistent"
    frame.loc[frame["sampler"] == "sde16_t9", "gen_ppl"] = 33.66 + 2.9
    result = review.compare(frame, setup["points"]).set_index(["sampler", "metric"])
    assert result.loc[("sde16_t9", "gen_ppl"), "verdict"] == "consistent"


def test_review_banner_trends_and_unstated(setup):
    exp = setup["exp"]
    frame = load_rows(exp, all_pairs(exp), EvalFolders.under(setup["aggregates"]))
    comparisons = review.compare(frame, setup["points"])
    doc = review.build_review(comparisons, review.unmatched(setup["points"], comparisons),
                              "TREND TABLE HERE\n", "embedded", ["F5c γ not stated: we use 1.0"])
    paths = review.write_review(doc, setup["tmp"] / "rev")
    md, html = (p.read_text() for p in paths)
    assert "NOT A REPLICATION" in md and "class='banner'" in html
    assert "F5c γ not stated: we use 1.0" in md
    assert "## Trend checks" in md and "TREND TABLE HERE" in md and "<pre>TREND TABLE HERE" in html
    counts = comparisons["verdict"].value_counts()
    assert f"Paper values compared: {len(comparisons)}: {counts.get('consistent', 0)} consistent, " \
           f"{counts.get('inconsistent', 0)} inconsistent, {counts.get('not resolved', 0)} not resolved" in md
    assert "## Verdict rule" in md and "se_paper := se_ours" in md
    for src, group in comparisons.groupby("src"):        # the summary counts per table and per source
        assert f"| table | {src} | {len(group)} |" in md
    assert f"| source | paper | {len(comparisons)} |" in md
    assert ">nan<" not in html and "| nan |" not in md     # unconditional rows: split '–'
    assert "<td>–</td>" in html
    paper_doc = review.build_review(comparisons, comparisons.iloc[0:0], "", "paper")
    assert "NOT A REPLICATION" not in review.to_markdown(paper_doc)


# --------------------------------------------------------------------------------------------------
# Stage and manifest
# --------------------------------------------------------------------------------------------------

def stage_args(setup, *extra):
    config_path = setup["tmp"] / "config.yaml"
    config_path.write_text(yaml.safe_dump(setup["config"]))
    return ["report", "--config", str(config_path), "--evals", *map(str, eval_dirs_under(setup["aggregates"])),
            "--dataset-scores-root", str(setup["datasets"]), "--paper-values", str(PAPER_VALUES),
            "--out", str(setup["tmp"] / "reports"), *extra]


def test_stage_writes_everything_and_manifest_lists_it(setup):
    unstated = setup["tmp"] / "unstated.yaml"
    unstated.write_text(yaml.safe_dump(["training seeds: 42"]))
    chosen = ["F4", "F16b", "T3", "T9", "T99"]
    assert elf_main(stage_args(setup, "--unstated-settings", str(unstated), "--only", *chosen)) == 0
    out = setup["tmp"] / "reports"
    for figure_id, spec in ((i, FIGURE_SPECS[i]) for i in chosen):
        suffixes = (".png", ".csv", ".json") if spec["kind"] == "figure" else \
            (".csv", ".md", ".tex", ".json")
        folder = "figures" if spec["kind"] == "figure" else "tables"
        for suffix in suffixes:
            assert (out / folder / f"{figure_id}{suffix}").stat().st_size > 0
    manifest_text = (out / "all").read_text()
    produced = [p for p in out.rglob("*") if p.is_file() and p.name != "all"]
    assert len(produced) == 2 * 3 + 3 * 4 + 3  # the review: replication.md, .html and trends.md
    for path in produced:
        assert f"`{path.as_posix()}`" in manifest_text, path
    assert str(plan.aggregate_path(setup["aggregates"], setup["exp"], "R01", "ode64_w1")) in manifest_text
    assert "scores/R01/ode64_w1/seed0.json" in manifest_text
    assert "training seeds: 42" in (out / "replication.md").read_text()


def test_stage_modes_and_errors(setup, capsys):
    out = setup["tmp"] / "reports"
    assert elf_main(stage_args(setup, "--figure", "F4")) == 0
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["F4.csv", "F4.json", "F4.png"]
    assert elf_main(stage_args(setup, "--manifest", "--only", "F4")) == 2  # review not written yet
    assert "replication.md" in capsys.readouterr().err
    assert elf_main(stage_args(setup, "--review", "--only", "F4")) == 0
    assert elf_main(stage_args(setup, "--manifest", "--only", "F4")) == 0
    assert "F4.png" in (out / "all").read_text()
    plan.aggregate_path(setup["aggregates"], setup["exp"], "R01", "ode64_w3").unlink()
    assert elf_main(stage_args(setup, "--figure", "F4")) == 2
    err = capsys.readouterr().err
    assert "R01/ode64_w3/aggregates/ode64_w3.json" in err and "aggregate" in err
    assert elf_main(stage_args(setup, "--figure", "F404")) == 2
    assert "F404" in capsys.readouterr().err


def test_a_separate_decoder_is_drawn_as_a_deviation_and_the_review_lists_deviations_apart(setup):
    frame, inputs = figure_inputs(setup, "F5b")
    fig, _ = draw("F5b", "figure", inputs)
    assert "Deviation" not in " ".join(t.get_text() for t in fig.texts)   # shared decoder only
    inputs.frame = frame.assign(decode_head=False)
    fig, _ = draw("F5b", "figure", inputs)
    assert "mirror of the T5 encoder" in " ".join(t.get_text() for t in fig.texts)
    comparisons = review.compare(frame, setup["points"])
    md = review.to_markdown(review.build_review(
        comparisons, comparisons.iloc[0:0], "", "paper", ["Deviation (F5b): ELF-block decoder", "γ 1.0"]))
    deviations, unstated = md.split("## Deviations from what the paper states")[1].split(
        "## Settings not stated in the paper")
    assert "- Deviation (F5b): ELF-block decoder" in deviations and "γ 1.0" not in deviations
    assert "- γ 1.0" in unstated and "Deviation" not in unstated
