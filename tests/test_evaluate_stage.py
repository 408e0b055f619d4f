"""``elf evaluate``: one job that samples, scores and aggregates several samplers of a run gives the
same files as ``elf sample`` + ``elf score`` + ``elf aggregate`` run one by one, resumes after a
failure keeping finished samplers, and refuses bad plans. The evaluation layout of ``elf.plan``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import elf.stages.evaluate as evaluate_stage
from elf import pairs
from elf import plan
from elf.cli import main
from elf.validate import parse_experiment
from elf.artifacts import read_json
from tests.test_sample_stage import SAMPLER, build_checkpoint, build_tokenizer
from tests.test_scorer import SETTINGS as SCORER_SETTINGS
from tests.test_scorer import corpus, scorer_dir  # noqa: F401  (fixtures)

ODE = dict(method="ode", steps=2, sc_cfg=1.0)


@pytest.fixture(scope="module")
def assets(tmp_path_factory, scorer_dir):  # noqa: F811
    root = tmp_path_factory.mktemp("eval-assets")
    build_checkpoint(root / "run")
    build_tokenizer(root / "tok")
    return root, scorer_dir


def plan_json(samplers: dict) -> str:
    return json.dumps(dict(run="base", task="unconditional", n=4, batch_size=2, score_batch_size=4,
                           precision="fp32", samplers=samplers))


def evaluate(assets, out, samplers) -> int:
    root, scorer = assets
    return main(["evaluate", "--plan", plan_json(samplers), "--checkpoint", str(root / "run"),
                 "--tokenizer", str(root / "tok"), "--scorer", str(scorer), "--device", "cpu",
                 "--out-dir", str(out), "--no-progress"])


SAMPLERS = {"sde3": dict(settings=SAMPLER, seeds=[0, 1], split=None),
            "ode2": dict(settings=ODE, seeds=[0], split=None)}


def test_one_job_equals_the_stages_one_by_one(assets, tmp_path):
    root, scorer = assets
    assert evaluate(assets, tmp_path / "all", SAMPLERS) == 0
    out = tmp_path / "all"
    assert sorted(p.name for p in out.iterdir()) == ["aggregates", "samples", "scores"]
    assert not (tmp_path / "all.partial").exists()
    # the same sampler through the three stages separately
    sep = tmp_path / "sep"
    assert main(["sample", "--checkpoint", str(root / "run"), "--sampler", json.dumps(SAMPLER),
                 "--sampler-name", "sde3", "--run-name", "base", "--seed", "0", "1", "--n", "4",
                 "--batch-size", "2", "--tokenizer", str(root / "tok"), "--out-dir", str(sep / "samples"),
                 "--no-progress"]) == 0
    for seed in (0, 1):
        assert (sep / "samples" / f"seed{seed}.jsonl").read_bytes() == \
            (out / "samples" / "sde3" / f"seed{seed}.jsonl").read_bytes()
    assert main(["score", "--samples", str(sep / "samples/seed0.jsonl"), str(sep / "samples/seed1.jsonl"),
                 "--scorer", str(scorer), "--batch-size", "4", "--device", "cpu",
                 "--out-dir", str(sep / "scores")]) == 0
    for seed in (0, 1):
        ours = read_json(out / "scores" / "sde3" / f"seed{seed}.json")
        theirs = read_json(sep / "scores" / f"seed{seed}.json")
        assert ours["metrics"] == theirs["metrics"] and ours["per_sample"] == theirs["per_sample"]
    agg = read_json(out / "aggregates" / "sde3.json")
    assert agg["run"] == "base" and agg["sampler"] == "sde3"
    # provenance names the files where they are now, not in the staging folder they were built in
    for source in agg["provenance"]["scores"]:
        assert ".partial" not in source["path"] and Path(source["path"]).is_file()
        assert Path(read_json(source["path"])["provenance"]["samples"]).is_file()
    assert agg["metrics"]["gen_ppl"]["n"] == 2
    assert read_json(out / "aggregates" / "ode2.json")["metrics"]["gen_ppl"]["n"] == 1


def test_a_failed_job_keeps_finished_samplers(assets, tmp_path, monkeypatch):
    out = tmp_path / "all"
    calls = []
    real = evaluate_stage.evaluate_sampler

    def failing(args, plan_, name, entry, staging):
        calls.append(name)
        if name == "ode2" and len(calls) == 2:
            raise KeyboardInterrupt  # the job is killed while evaluating the second sampler
        real(args, plan_, name, entry, staging)

    monkeypatch.setattr(evaluate_stage, "evaluate_sampler", failing)
    with pytest.raises(KeyboardInterrupt):
        evaluate(assets, out, SAMPLERS)
    assert not out.exists() and (tmp_path / "all.partial" / "done" / "sde3.json").exists()
    assert evaluate(assets, out, SAMPLERS) == 0
    assert calls == ["sde3", "ode2", "ode2"]  # sde3 was not redone
    assert (out / "aggregates" / "sde3.json").exists() and (out / "aggregates" / "ode2.json").exists()
    # a sampler dropped from the plan leaves the folder on the next run
    assert evaluate(assets, out, {"ode2": SAMPLERS["ode2"]}) == 0
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["ode2"]
    assert sorted(p.name for p in (out / "aggregates").iterdir()) == ["ode2.json"]


def test_a_damaged_finished_sampler_is_redone_never_published(assets, tmp_path, monkeypatch, capsys):
    """Issue 26: the done marker vouches for the sha256 of the files it marks. A finished sampler's
    samples file cut after the kill is evaluated again on resume, and the published file is whole."""
    out = tmp_path / "all"
    calls = []
    real = evaluate_stage.evaluate_sampler

    def failing(args, plan_, name, entry, staging):
        calls.append(name)
        if name == "ode2" and len(calls) == 2:
            raise KeyboardInterrupt
        real(args, plan_, name, entry, staging)

    monkeypatch.setattr(evaluate_stage, "evaluate_sampler", failing)
    with pytest.raises(KeyboardInterrupt):
        evaluate(assets, out, SAMPLERS)
    staged = tmp_path / "all.partial" / "samples" / "sde3" / "seed0.jsonl"
    whole = staged.read_text()
    staged.write_text("\n".join(whole.splitlines()[:-1]) + "\n")  # the last sample cut off
    capsys.readouterr()
    assert evaluate(assets, out, SAMPLERS) == 0
    assert calls == ["sde3", "ode2", "sde3", "ode2"]  # sde3 redone despite its marker
    assert "changed since" in capsys.readouterr().err
    published = out / "samples" / "sde3" / "seed0.jsonl"
    assert len(published.read_text().splitlines()) == 1 + 4  # header + n samples
    assert published.read_text().splitlines()[1:] == whole.splitlines()[1:]  # the same draws
    # an intact finished sampler is kept: a rerun after another kill does not redo it
    assert json.loads((out / "aggregates" / "sde3.json").read_text())["metrics"]["gen_ppl"]["n"] == 2


@pytest.mark.parametrize("plan_text, words", [
    ("{not json", "not an evaluation plan"),
    (json.dumps({"run": "base"}), "not an evaluation plan"),
    (plan_json({}), "no samplers"),
    # a per-sampler example count: conditional tasks only
    (plan_json({"sde3": dict(settings=SAMPLER, seeds=[0], split=None, n=1000)}), "'samplers.sde3.n'"),
])
def test_bad_plans_are_refused(assets, tmp_path, capsys, plan_text, words):
    root, scorer = assets
    code = main(["evaluate", "--plan", plan_text, "--checkpoint", str(root / "run"), "--tokenizer",
                 str(root / "tok"), "--scorer", str(scorer), "--out-dir", str(tmp_path / "out")])
    assert code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unconditional_needs_a_scorer(assets, tmp_path, capsys):
    root, _ = assets
    code = main(["evaluate", "--plan", plan_json(SAMPLERS), "--checkpoint", str(root / "run"),
                 "--tokenizer", str(root / "tok"), "--out-dir", str(tmp_path / "out")])
    assert code == 2 and "--scorer" in capsys.readouterr().err


def experiment(group_by: str):
    return parse_experiment({
        "datasets": {"owt": {"task": "unconditional", "source": "embedded", "name": "owt",
                             "max_length": 8}},
        "embeddings": {"encoder": {"kind": "encoder", "encoder": "main"}},
        "encoders": {"main": {"source": "build"}},
        "run_defaults": {"dataset": "owt"},
        "runs": {"base": {}, "other": {}, "unused": {}},
        "samplers": {"a": {"method": "ode", "steps": 2}, "b": {"method": "ode", "steps": 4}},
        "evaluation": {"seeds": [3, 4, 5], "group_by": group_by},
        "figures": {"F1": {"kind": "figure", "title": "t", "runs": ["base"], "samplers": ["a", "b"],
                           "seeds": "all"},
                    "F2": {"kind": "figure", "title": "t", "runs": ["base", "other"], "samplers": ["b"]}},
    })


def test_plan_groups_seeds_and_paths():
    by_run, by_sampler = experiment("run"), experiment("sampler")
    assert pairs.run_samplers(by_run, "base") == ["a", "b"] and pairs.run_samplers(by_run, "other") == ["b"]
    assert pairs.evaluated_runs(by_run) == ["base", "other"]
    assert pairs.seeds_of(by_run, "base", "b") == (3, 4, 5)   # F1 asks for all seeds of (base, b)
    assert pairs.seeds_of(by_run, "other", "b") == (3,)
    assert plan.eval_groups(by_run, "base") == {"all": ["a", "b"]}
    assert plan.eval_groups(by_sampler, "base") == {"a": ["a"], "b": ["b"]}
    assert plan.group_samplers(by_sampler, "base", "zzz") == []
    assert str(plan.aggregate_path("E", by_run, "base", "b")) == "E/base/all/aggregates/b.json"
    assert str(plan.samples_file("E", by_sampler, "base", "b", 4)) == "E/base/b/samples/b/seed4.jsonl"
    assert plan.eval_dirs_of("E", by_run, pairs.figure_pairs(by_run, "F2")) == ["E/base/all", "E/other/all"]


def test_recorded_path_moves_only_paths_under_the_staging_folder():
    from elf.io import recorded_path

    assert recorded_path("a/b.partial/x/y.json", "a/b.partial=a/b") == "a/b/x/y.json"
    assert recorded_path("a/b.partial", "a/b.partial=a/b") == "a/b"
    assert recorded_path("a/b.partialx/y", "a/b.partial=a/b") == "a/b.partialx/y"
    assert recorded_path("c/d.json", None) == "c/d.json"


def test_upstream_runs_are_the_distillation_teachers_and_their_replicates():
    import yaml

    root = Path(__file__).resolve().parents[1]
    exp = parse_experiment(yaml.safe_load((root / "config" / "config.yaml").read_text()))
    # pd_r1..pd_r5 distil `base` (teacher and first init); the later inits are distill runs, not trained.
    assert pairs.upstream_runs(exp) == ["base", "base_seed1", "base_seed2"]
