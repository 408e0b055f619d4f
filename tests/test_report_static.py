"""Tests of the report's configuration tables and bar figures: T2, T6, T7, T8, T11 and F1, F7c, F9b,
the run metadata they read (``config.json``, ``tokens.json``) and the review's configuration checks.

Run metadata is written by hand in ``tmp_path`` (a real tiny network gives T6 its parameter count);
the paper's values are the project's copy (``config/paper_values.yaml``).
Run: ``python -m pytest tests/test_report_static.py -q``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from elf.report.folders import EvalFolders
from elf.artifacts.layout import eval_dirs_under
from elf.cli import main as elf_main
from elf import plan
from elf.validate import parse_experiment
from elf.model import ELF, ModelConfig
from elf.report import cells, config_tables, render, review
from elf.report.cells import TableInputs
from elf.report.paper import load_paper_values, paper_points
from elf.report.plotting import FigureInputs
from elf.report.results import MissingInputError, figure_frame
from elf.report.runs import load_runs_meta

PAPER_VALUES = Path(__file__).resolve().parent.parent / "config" / "paper_values.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = ModelConfig(depth=1, width=32, heads=2, d=8, bottleneck=8, vocab_size=50, max_length=16)
STEPS, BATCH, STORE_TOKENS = 20, 8, 640           # 20 × 8 × 16 = 2,560 tokens = 4 epochs of 640
BASE_TOKENS = STEPS * BATCH * TINY.max_length
ROUND_TOKENS = {"pd_a": 100, "pd_b": 300}


def run_settings(**overrides) -> dict:
    """The ``run`` section of a config.json (as `elf train` writes it), with overrides."""
    run = {"kind": "train", "paper_run": "R01", "teacher": None,
           "model": {"size": "tiny"},
           "budget": {"steps": STEPS, "batch_size": BATCH},
           "objective": {"t_mean": -1.5, "t_std": 0.8, "noise_scale": 2.0,
                         "decode_lambda_mean": 0.8, "decode_lambda_std": 0.8,
                         "decode_noise_scale": 5.0, "decode_prob": 0.2, "self_cond_prob": 0.5,
                         "sc_cfg_min": 0.5, "sc_cfg_max": 5.0},
           "optim": {"name": "muon", "blr": 0.001, "weight_decay": 0.0, "warmup_steps": 2,
                     "ema_decay": 0.999}}
    for key, value in overrides.items():
        run[key] = {**run[key], **value} if isinstance(value, dict) else value
    return run


def write_config(root: Path, name: str, run: dict, model: ModelConfig = TINY) -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model": dataclasses.asdict(model), "run": run, "num_parameters": ELF(model).num_parameters(),
        "embedding": {"kind": "encoder", "encoder": "main"},
        "normalization_stats": {"count": STORE_TOKENS}}))


def write_round(root: Path, name: str, rounds: list[str]) -> None:
    """A distillation round's config.json and tokens.json (as `elf distill` writes them)."""
    write_config(root, name, run_settings(kind="distill", teacher="base", paper_run=None))
    distill_total = sum(ROUND_TOKENS[r] for r in rounds)
    (root / name / "tokens.json").write_text(json.dumps({
        "run": name, "kind": "distill", "round": len(rounds), "teacher": "base",
        "tokens_seen": ROUND_TOKENS[name],
        "rounds": [{"run": r, "tokens_seen": ROUND_TOKENS[r]} for r in rounds],
        "distill_tokens_total": distill_total, "teacher_tokens_seen": BASE_TOKENS,
        "total_tokens_seen": BASE_TOKENS + distill_total}))


def fig(kind, runs, samplers=()):
    return {"kind": kind, "title": "t", "runs": list(runs), "samplers": list(samplers)}


def make_config() -> dict:
    distill = {"student_steps": 2, "teacher_substeps": 2}
    return {
        "datasets": {"owt": {"task": "unconditional", "source": "embedded", "name": "owt"}},
        "encoders": {"main": {"d_model": 8}},
        "embeddings": {"encoder": {"encoder": "main"}},
        "runs": {"base": {"dataset": "owt", "paper_run": "R01"},
                 "pd_a": {"dataset": "owt", "kind": "distill", "teacher": "base",
                          "init_from": "base", "distill": distill},
                 "pd_b": {"dataset": "owt", "kind": "distill", "teacher": "base",
                          "init_from": "pd_a", "distill": distill}},
        "samplers": {"sde32": {"method": "sde", "steps": 32, "gamma": 1.5, "sc_cfg": 3.0}},
        "figures": {"T2": fig("table", []), "T11": fig("table", []), "T6": fig("table", ["base"]),
                    "T7": fig("table", ["base"]), "T8": fig("table", ["base", "pd_b"]),
                    "F7c": fig("figure", ["base"]), "F9b": fig("figure", ["pd_a", "pd_b"]),
                    "F1": fig("figure", ["base"], ["sde32"])},
    }


@pytest.fixture
def setup(tmp_path):
    config = make_config()
    runs = tmp_path / "runs"
    write_config(runs, "base", run_settings())
    write_round(runs, "pd_a", ["pd_a"])
    write_round(runs, "pd_b", ["pd_a", "pd_b"])
    aggregate = plan.aggregate_path(tmp_path / "evals", parse_experiment(config), "base", "sde32")
    aggregate.parent.mkdir(parents=True)
    aggregate.write_text(json.dumps({"provenance": {}, "run": "base", "sampler": "sde32",
                                     "metrics": {"gen_ppl": {"mean": 30.0, "se": 0.5, "n": 6},
                                                 "entropy": {"mean": 5.2, "se": 0.01, "n": 6}}}))
    paper_values = load_paper_values(PAPER_VALUES)
    return {"tmp": tmp_path, "config": config, "exp": parse_experiment(config), "runs": runs,
            "aggregates": tmp_path / "evals", "paper_values": paper_values,
            "points": paper_points(paper_values)}


def render_table(setup, table_id) -> dict[str, str]:
    exp = setup["exp"]
    inputs = TableInputs(table_id, "title", figure_frame(exp, table_id, EvalFolders.under(setup["aggregates"])),
                                setup["points"], exp, setup["paper_values"],
                                load_runs_meta(setup["runs"], exp.figures[table_id].runs))
    paths = render.render_table(table_id, inputs, setup["tmp"] / "tables")
    assert all(p.stat().st_size > 0 for p in paths)
    return {p.suffix: p.read_text() for p in paths}


def render_figure(setup, figure_id) -> pd.DataFrame:
    exp = setup["exp"]
    inputs = FigureInputs(figure_id, "title",
                                  figure_frame(exp, figure_id, EvalFolders.under(setup["aggregates"])),
                                  setup["points"], {},
                                  load_runs_meta(setup["runs"], exp.figures[figure_id].runs),
                                  setup["paper_values"])
    png, csv = render.render_figure(figure_id, inputs, setup["tmp"] / "figures", dpi=40)
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 2000
    return pd.read_csv(csv)


def md_row(md: str, first_cell: str) -> list[str]:
    """The cells of the Markdown row whose first cell is ``first_cell``."""
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in\n{md}")


# --------------------------------------------------------------------------------------------------
# Configuration and settings
# --------------------------------------------------------------------------------------------------

def test_tables_without_runs_or_samplers_are_valid(setup):
    exp = setup["exp"]
    assert exp.figures["T2"].runs == () and exp.figures["T2"].samplers == ()
    assert figure_frame(exp, "T2", EvalFolders.under(setup["aggregates"])).empty
    assert load_runs_meta(setup["runs"], exp.figures["T11"].runs) == {}


def test_same_setting_by_hand():
    assert cells.same_setting("105M", 104_594_304, 0.01) == "yes"
    assert cells.same_setting("342M", 342_554_400, 0.01) == "yes"   # within 1%
    assert cells.same_setting("105M", 47_830, 0.01) == "no"
    assert cells.same_setting("Muon", "muon", 0) == "yes"
    assert cells.same_setting([0.5, 5.0], [0.5, 5.0], 0) == "yes"
    assert cells.same_setting([0.8, 0.2], [0.5, 0.5], 0) == "no"
    assert cells.same_setting(0.9999, 0.999, 0) == "no"
    assert cells.same_setting(5, 4.96, 0.01) == "yes" and cells.same_setting(5, 4.9, 0.01) == "no"
    assert cells.same_setting("T5-small", "encoder", None) == cells.DASH


# --------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------

def test_t2_is_the_papers_survey_as_is(setup):
    out = render_table(setup, "T2")
    rows = setup["paper_values"]["table_2"]["rows"]
    csv = pd.read_csv(setup["tmp"] / "tables" / "T2.csv", keep_default_na=False)
    assert len(csv) == len(rows) == 26 and list(csv["Method"]) == [r[0] for r in rows]
    elf = md_row(out[".md"], "ELF (ours)")
    assert elf == ["ELF (ours)", "FM", "fix enc", "", "", ""]       # no per-step discr., no decoder
    assert md_row(out[".md"], "Diffusion-LM 2022")[3:6] == ["✓", "✓", ""]
    assert "\\checkmark" in out[".tex"]


def test_t11_is_the_papers_baseline_settings(setup):
    out = render_table(setup, "T11")
    assert md_row(out[".md"], "Global batch size")[1:] == ["128", "128", "128", "512", "512"]
    assert md_row(out[".md"], "Cfg scale")[1:] == ["–", "–", "–", "1", "1.5"]
    assert "AR (XSum) (paper)" in out[".md"] and "Duo (De-En) (paper)" in out[".md"]
    assert "trains no baselines" in out[".md"]


def test_t6_counts_the_runs_network_and_epochs(setup):
    real = sum(p.numel() for p in ELF(TINY).parameters())
    out = render_table(setup, "T6")
    row = md_row(out[".md"], "tiny [base]")
    assert row[1:5] == ["ours", "1", "32", "2"]
    assert row[5] == f"{real / 1e6:.1f}M ({real:,})"
    assert row[6] == f"{BASE_TOKENS:,}" and row[7] == f"{BASE_TOKENS / STORE_TOKENS:.2f}"
    assert md_row(out[".md"], "ELF-B")[1:6] == ["paper (T6)", "12", "768", "12", "105M"]


def test_our_network_at_the_paper_sizes_has_the_papers_parameter_count():
    for size, paper in (("ELF-B", 105e6), ("ELF-M", 342e6), ("ELF-L", 652e6)):
        assert abs(config_tables.paper_dims_params(size) - paper) <= 0.01 * paper, size


def test_t7_compares_d0_with_the_runs_settings(setup):
    out = render_table(setup, "T7")
    lr = md_row(out[".md"], "Optimisation")  # first optimisation row: the optimiser
    assert lr[1:] == ["Optimiser", "Muon", "muon", "yes"]
    rows = {line.split(" | ")[1]: line.strip(" |").split(" | ") for line in out[".md"].splitlines()
            if line.startswith("| ") and line.count(" | ") == 4}
    assert rows["Learning rate (blr × batch / 256)"][2:] == ["0.002", f"{0.001 * BATCH / 256:.4g}",
                                                              "no"]
    assert rows["Global batch"][2:] == ["512", str(BATCH), "no"]
    assert rows["Denoise / decode probability"][2:] == ["0.8 / 0.2", "0.8 / 0.2", "yes"]
    assert rows["EMA decay"][2:] == ["0.9999", "0.999", "no"]
    assert rows["Epochs"][2:] == ["5", f"{BASE_TOKENS / STORE_TOKENS:.4g}", "no"]
    config = json.loads((setup["runs"] / "base" / "config.json").read_text())
    config["run"]["budget"]["batch_size"] = 512  # 0.001 × 512 / 256 = the paper's 0.002
    items = {i["key"]: i for i in config_tables.d0_items(config, setup["paper_values"]["table_7"])}
    assert items["learning_rate"]["same"] == "yes" and items["global_batch_size"]["same"] == "yes"


def test_t8_tokens_are_steps_batch_length_of_the_runs(setup):
    out = render_table(setup, "T8")
    elf = md_row(out[".md"], "ELF [base]")
    assert elf[1] == f"{BATCH} × {STEPS} × {TINY.max_length}"
    assert elf[3] == f"{BASE_TOKENS:,}" and elf[5] == "1.0"
    total = BASE_TOKENS + sum(ROUND_TOKENS.values())
    pd_row = md_row(out[".md"], "ELF+PD [pd_b]")
    assert pd_row[2] == f"2 rounds: {sum(ROUND_TOKENS.values()):,}"
    assert pd_row[3] == f"{total:,}" and pd_row[5] == f"{total / BASE_TOKENS:.1f}"
    assert md_row(out[".md"], "ELF-B")[4:6] == ["45.2", "1.0"]
    assert md_row(out[".md"], "FMLM")[4:6] == ["576.7", "12.8"]
    assert md_row(out[".md"], "ELF-B+PD")[4:6] == ["90.0", "2.0"]


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------

def test_f9b_sums_the_rounds_of_the_chain(setup):
    plotted = render_figure(setup, "F9b")
    ours = plotted[plotted["source"] == "ours"]
    assert set(ours["run"]) == {"pd_b"}  # pd_a is a round of pd_b's chain, not a bar of its own
    assert list(ours["y"]) == [BASE_TOKENS, ROUND_TOKENS["pd_a"], ROUND_TOKENS["pd_b"]]
    assert list(ours["label"]) == ["base training", "pd_a", "pd_b"]
    paper = plotted[plotted["source"] == "paper"].groupby("series", sort=False)["y"].sum()
    assert paper.to_dict() == pytest.approx({"ELF+PD": 90e9, "MDLM+SDTT": 550.5e9,
                                             "Duo+DCD": 550.5e9, "FMLM": 576.7e9})


def test_f7c_bars_are_base_and_extra_distillation(setup):
    plotted = render_figure(setup, "F7c")
    ours = plotted[plotted["source"] == "ours"]
    assert list(ours["y"]) == [BASE_TOKENS] and list(ours["label"]) == ["base training"]
    assert ours["aggregate_path"].iloc[0].endswith("runs/base/config.json")
    paper = plotted[plotted["source"] == "paper"].set_index(["series", "label"])["y"]
    assert paper[("ELF", "base training")] == 45.2e9
    assert paper[("MDLM (+SDTT)", "base training")] == 524.3e9
    assert paper[("FLM (FMLM)", "extra distillation")] == pytest.approx(576.7e9 - 524.3e9)


def test_f1_draws_our_bar_beside_the_papers(setup):
    plotted = render_figure(setup, "F1")
    ours = plotted[plotted["source"] == "ours"].iloc[0]
    assert (ours["run"], ours["sampler"], ours["y"], ours["y_se"]) == ("base", "sde32", 30.0, 0.5)
    paper = plotted[plotted["source"] == "paper"].iloc[0]
    assert (paper["y"], paper["y_se"], paper["steps"]) == (24.08, 0.16, 32)  # Table 9, 32 steps
    assert len(plotted) == 2  # no baseline bars: the paper states no values


# --------------------------------------------------------------------------------------------------
# Stage and review
# --------------------------------------------------------------------------------------------------

def stage_args(setup, *extra, runs_root=True):
    config_path = setup["tmp"] / "config.yaml"
    config_path.write_text(yaml.safe_dump(setup["config"]))
    args = ["report", "--config", str(config_path), "--evals", *map(str, eval_dirs_under(setup["aggregates"])),
            "--paper-values", str(PAPER_VALUES), "--out", str(setup["tmp"] / "reports")]
    return args + (["--runs-root", str(setup["runs"])] if runs_root else []) + list(extra)


def test_stage_records_run_metadata_and_names_what_is_missing(setup, capsys):
    assert elf_main(stage_args(setup, "--figure", "F9b")) == 0
    sidecar = json.loads((setup["tmp"] / "reports" / "figures" / "F9b.json").read_text())
    paths = [entry["path"] for entry in sidecar["run_metadata"]]
    assert str(setup["runs"] / "pd_b" / "tokens.json") in paths and len(paths) == 4
    assert elf_main(stage_args(setup, "--figure", "T2", runs_root=False)) == 0
    assert elf_main(stage_args(setup, "--figure", "T8", runs_root=False)) == 2
    assert "--runs-root" in capsys.readouterr().err
    (setup["runs"] / "base" / "config.json").unlink()
    with pytest.raises(MissingInputError, match="base/config.json"):
        load_runs_meta(setup["runs"], ["base"])
    assert elf_main(stage_args(setup, "--figure", "T6")) == 2
    assert "base/config.json" in capsys.readouterr().err


def test_review_lists_configuration_checks_apart(setup):
    assert elf_main(stage_args(setup, "--review")) == 0
    md = (setup["tmp"] / "reports" / "replication.md").read_text()
    assert "## Configuration and arithmetic checks (not measurements)" in md
    assert f"| T8 | arithmetic | ELF-B training tokens (B) | base | 45.2 | " \
           f"{BASE_TOKENS / 1e9:.3g} | no |" in md
    assert "| T7 | configuration | Optimiser | base | Muon | muon | yes |" in md
    assert "Paper values compared: 2:" in md  # F1's T9 32-step Gen. PPL and entropy only


def test_configuration_checks_accept_the_papers_own_settings(setup):
    config = json.loads((setup["runs"] / "base" / "config.json").read_text())
    config["model"]["max_length"], config["run"]["budget"] = 1024, {"steps": 86_212,
                                                                    "batch_size": 512}
    config["normalization_stats"]["count"] = 9.04e9  # OWT: 5 epochs = 45.2B tokens
    meta = {"base": {"config": config, "config_path": "base/config.json", "tokens": None}}
    checks = review.configuration_checks({"T8": meta}, setup["paper_values"])
    assert list(checks["same"]) == ["yes"] and list(checks["ours"]) == ["45.2"]
    checks = review.configuration_checks({"T6": meta}, setup["paper_values"]).set_index("item")
    assert checks.loc["ELF-B training epochs", "same"] == "yes"
    assert checks.loc["ELF-B parameters, our network at the paper's dims", "same"] == "yes"


def test_t6_shows_r28s_adaln_zero_parameters_beside_the_papers_148m(setup):
    """R28 (adaLN-Zero ELF-B) is 148M in the paper's text (App. D, F14): T6 has a row for it, our
    network at the paper's dims counts 148.29M, and R28's own run is checked against 148M, not 105M."""
    assert config_tables.paper_dims_params(config_tables.ADALN_MODEL) == 148_289_664
    config = json.loads((setup["runs"] / "base" / "config.json").read_text())
    config["run"]["paper_run"], config["num_parameters"] = "R28", 148_289_664
    meta = {"adaln": {"config": config, "config_path": "adaln/config.json", "tokens": None}}
    md = config_tables.table_T6(cells.TableInputs("T6", "t", None, None, None, setup["paper_values"],
                                                  meta)).to_markdown()
    assert md_row(md, "ELF-B (adaLN-Zero)")[1:6] == ["paper (T6 / App. D (F14))", "12", "768", "12", "148M"]
    assert "148.3M (148,289,664)" in md
    checks = review.configuration_checks({"T6": meta}, setup["paper_values"]).set_index("item")
    assert checks.loc["ELF-B (adaLN-Zero) parameters", "same"] == "yes"
    assert checks.loc["ELF-B (adaLN-Zero) parameters, our network at the paper's dims", "same"] == "yes"
