"""The DAG's plan in Python (elf/plan.py): the paths, inputs and settings the rules take from
``plan.Dag``, and the config slice each figure's job gets, so that editing one run, sampler or figure
re-plans only what uses it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from elf import pairs
from elf import plan
from elf.validate import parse_experiment
from elf.report.registry import needs

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.fixture(scope="module")
def ci():
    config = load("ci.yaml")
    return config, plan.Dag(parse_experiment(config), needs)


def slices(config: dict) -> dict[str, str]:
    dag = plan.Dag(parse_experiment(config), needs)
    return {fid: dag.figure_settings_json(config, fid) for fid in config["figures"]}


def test_a_figure_slice_is_a_config_of_that_figure_alone(ci):
    config, dag = ci
    part = json.loads(dag.figure_settings_json(config, "T5"))
    assert list(part["figures"]) == ["T5"] and list(part["samplers"]) == ["pd_sde1"]
    # the rounds plotted, and the runs they name (teacher, init_from), nothing else
    assert list(part["runs"]) == ["base", "pd_r1", "pd_r2", "pd_r3", "pd_r4", "pd_r5"]
    assert "trends" not in part and part["datasets"] == config["datasets"]
    sliced = parse_experiment(part)  # `elf report --settings` reads it as an experiment
    assert sliced.run("pd_r5") == dag.exp.run("pd_r5")


@pytest.mark.parametrize("edit, changed", [
    # one run's setting: the figures and tables of that run only
    (lambda c: c["runs"]["wmt"]["objective"].update(label_drop_prob=0.2), {"T1"}),
    # the distillation teacher: every figure that shows a round, or the teacher itself
    (lambda c: c["runs"]["base"].update(paper_run="R99"), {"F4", "T9", "T3", "T5", "F9a", "F9b", "F18"}),
    # one sampler: the figures that plot it
    (lambda c: c["samplers"]["sde8"].update(gamma=0.5), {"T9"}),
    # one figure's own settings: that figure
    (lambda c: c["figures"]["F4"].update(title="edited"), {"F4"}),
    # a trend check: no figure (the review reads it)
    (lambda c: c["trends"]["more_steps"].update(claim="edited"), set()),
    # what the training-seed replicates are evaluated on: no figure either
    (lambda c: c["evaluation"].update(replicate_samplers=["sde8"]), set()),
])
def test_editing_one_setting_changes_only_the_slices_that_use_it(edit, changed):
    before = load("ci.yaml")
    after = copy.deepcopy(before)
    edit(after)
    old, new = slices(before), slices(after)
    assert {fid for fid in old if old[fid] != new[fid]} == changed


def test_figure_inputs_follow_the_registry(ci):
    config, dag = ci
    R = dag.R
    assert dag.evals_for("T9") == [f"{R}/evals/base/all"]
    assert dag.dataset_scores_for("F4") == [f"{R}/scores/_dataset/owt.json"]  # the "Dataset" line
    assert dag.dataset_scores_for("F9a") == []  # drawn without one
    assert dag.run_metadata_for("F9b") == [f"{R}/runs/pd_r{k}/ema.safetensors" for k in range(1, 6)] + \
        [f"{R}/runs/pd_r{k}/tokens.json" for k in range(1, 6)]
    assert dag.run_metadata_for("T9") == []
    assert dag.shown_for("F18") == [f"{R}/trajectories/base/ode16_w1.json"]
    assert dag.shown_for("F4") == []
    assert dag.figure_files("T1") == [f"{dag.P}/tables/T1{s}" for s in (".csv", ".md", ".tex", ".json")]
    figures = {f for f, fig in config["figures"].items() if fig["kind"] == "figure"}
    assert matched(dag.ids_of_kind("figure"), config["figures"]) == figures


def test_run_inputs_and_settings(ci):
    config, dag = ci
    R = dag.R
    w = SimpleNamespace(run="pd_r2")
    assert dag.distill_inputs(w) == {"store": f"{R}/embeddings/owt/encoder/train.zarr",
                                     "teacher": f"{R}/runs/base/ema.safetensors",
                                     "init": f"{R}/runs/pd_r1/ema.safetensors"}
    assert dag.train_data(SimpleNamespace(run="base")) == {"store": f"{R}/embeddings/owt/encoder/train.zarr"}
    assert dag.train_priority(SimpleNamespace(run="base")) == 50
    assert 1 <= dag.train_priority(SimpleNamespace(run="wmt")) <= 40   # off the critical path
    settings = json.loads(dag.train_settings_json("wmt"))
    assert settings["run"] == json.loads(json.dumps(plan.to_dict(dag.exp.run("wmt"))))
    assert "embed_shards" not in settings["dataset"]  # scheduling only: changing it retrains nothing
    assert matched(dag.runs_of_kind("distill"), [*config["runs"], "pd_r", "pd_r55"]) == \
        {f"pd_r{k}" for k in range(1, 6)}
    assert dag.runs_of_kind("released") == "(?!)"  # none: a regex that matches nothing
    train_runs = {n for n in config["runs"] if dag.exp.run(n).kind == "train"}
    assert matched(dag.runs_of_kind("train"), [*config["runs"], "pd_r", "pd_r55"]) == train_runs | {"pd_r", "pd_r55"}
    in_path = re.compile(f"{R}/runs/(?P<run>{dag.runs_of_kind('train')})/ema\\.safetensors")
    assert in_path.fullmatch(f"{R}/runs/base/ema.safetensors")
    assert not in_path.fullmatch(f"{R}/runs/pd_r1/ema.safetensors")
    assert len(plan.Dag(parse_experiment(load("paper.yaml")), needs).runs_of_kind("train")) < 200


def matched(regex: str, candidates) -> set[str]:
    """The candidates a wildcard regex matches whole (as Snakemake anchors it)."""
    return {c for c in candidates if re.fullmatch(f"(?:{regex})", c)}


def test_wildcard_regexes_match_exactly_their_names_as_a_trie():
    """Names that prefix each other, regex metacharacters; and one branch a character at most, so
    matching costs a path's length, not the number of names (issue 26: 10,000 runs)."""
    names = ["a", "ab", "abc", "b.c", "b+d", "s0001", "s0002"]
    regex = plan._alternatives(names)
    assert matched(regex, [*names, "", "abcd", "bxc", "b", "s000", "s0003", "ac"]) == set(names)
    assert regex.count("|") == 4  # {a, b, s} at the root, {., +} after b, {1, 2} after s000
    big = plan._alternatives(f"s{i:05d}" for i in range(10_000))
    assert re.fullmatch(f"(?:{big})", "s09999") and not re.fullmatch(f"(?:{big})", "s10000")


def test_evaluation_inputs(ci):
    _, dag = ci
    R = dag.R
    cond = SimpleNamespace(run="wmt", group="all")
    inputs = dag.eval_inputs(cond)
    assert inputs == {"stores": [f"{R}/embeddings/wmt/encoder/{dag.exp.evaluation.split}.zarr"],
                      "tokens": f"{R}/data/wmt/tokens"}
    assert dag.eval_input_args(cond, SimpleNamespace(keys=inputs.keys, **inputs)) == (
        f"--eval-data {R}/embeddings/wmt/encoder --tokens {R}/data/wmt/tokens")
    base = dag.eval_inputs(SimpleNamespace(run="base", group="all"))
    assert base == {"scorer": dag.scorer}
    assert dag.eval_input_args(SimpleNamespace(run="base"), SimpleNamespace(keys=base.keys, **base)) == (
        f"--scorer {dag.scorer}")
    job = json.loads(dag.eval_plan_json("base", "all"))
    assert set(job["samplers"]) == set(pairs.run_samplers(dag.exp, "base"))
    assert job["samplers"]["ode16_w1"]["seeds"] == list(pairs.seeds_of(dag.exp, "base", "ode16_w1"))


def test_a_separate_decoder_is_an_evaluation_input_and_argument():
    dag = plan.Dag(parse_experiment(load("paper.yaml")), needs)
    group = next(iter(plan.eval_groups(dag.exp, "R12")))
    inputs = dag.eval_inputs(SimpleNamespace(run="R12", group=group))
    assert inputs == {"scorer": dag.scorer, "decoder": f"{dag.R}/decoders/R11/model.safetensors"}
    args = dag.eval_input_args(SimpleNamespace(run="R12"), SimpleNamespace(keys=inputs.keys, **inputs))
    assert args == f"--scorer {dag.scorer} --decoder {dag.R}/decoders/R11"


def test_a_conditional_sampler_may_score_the_first_n_examples():
    """The authors' README protocol (their first 1000 validation examples) beside the whole split: a
    sampler's ``n_examples`` reaches its evaluation job; evaluation.n_examples stays the default."""
    dag = plan.Dag(parse_experiment(load("paper.yaml")), needs)
    job = json.loads(dag.eval_plan_json("R04", plan.eval_group(dag.exp, "R04", "cond_cfg2_val1000")))
    assert job["samplers"]["cond_cfg2_val1000"]["n"] == 1000
    if "cond_cfg2_val" in job["samplers"]:
        assert job["samplers"]["cond_cfg2_val"]["n"] == dag.exp.evaluation.n_examples
    whole = json.loads(dag.eval_plan_json("R04", plan.eval_group(dag.exp, "R04", "cond_cfg2_val")))
    assert whole["samplers"]["cond_cfg2_val"]["n"] == dag.exp.evaluation.n_examples


def test_the_paper_config_plans_without_a_figure_id_in_the_workflow():
    """Every figure's inputs come from its registry entry: no rule file names an id."""
    config = load("paper.yaml")
    dag = plan.Dag(parse_experiment(config), needs)
    for fid in config["figures"]:
        dag.evals_for(fid), dag.run_metadata_for(fid), dag.shown_for(fid), dag.dataset_scores_for(fid)
        parse_experiment(json.loads(dag.figure_settings_json(config, fid)))
    rules = "\n".join(p.read_text() for p in (ROOT / "workflow").rglob("*.smk"))
    named = sorted(fid for fid in config["figures"] if re.search(rf"\b{fid}\b(?![- ]style| encoder)", rules))
    assert not named, f"figure ids spelled in the workflow: {named}"


def test_training_priorities_put_the_critical_path_then_the_longest_runs_first():
    exp = parse_experiment(load("config.yaml"))
    dag = plan.Dag(exp, needs)
    priority = {n: dag.train_priority(SimpleNamespace(run=n)) for n in exp.runs if exp.run(n).kind == "train"}
    assert priority["base"] == priority["base_seed1"] == 50          # the distillation teacher's chain
    # steps x tokens x depth x width²: wmt (4x160, 2000 steps of 36 tokens) > xsum (2x96, 500 of 128)
    # > size_l (4x160, 200 of 48) > size_m (3x128) > the 2x96 ablations (200 of 48)
    assert priority["wmt"] == 40 > priority["xsum"] > priority["size_l"] > priority["size_m"]
    assert priority["size_m"] > priority["ref"] >= 1
    # a store takes its most urgent run's priority: wmt's is not left behind the ready 2x96 runs
    store = lambda dataset, embedding: dag.data_priority(SimpleNamespace(dataset=dataset, embedding=embedding))  # noqa: E731
    assert store("wmt", "encoder") == priority["wmt"] == 40
    assert store("owt", "encoder") == 50 and store("owt", "gaussian") == priority["emb_gauss"]
    assert store("owt", "no_such_embedding") == 0
    # and so do the packed tokens (prepare has no embedding): xsum's are not packed after every ablation
    tokens = lambda dataset: dag.data_priority(SimpleNamespace(dataset=dataset))  # noqa: E731
    assert tokens("xsum") == priority["xsum"] > priority["size_l"] and tokens("owt") == 50
