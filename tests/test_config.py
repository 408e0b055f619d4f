"""Configuration: every shipped config validates; bad keys, types and ranges fail with a message
naming the key, the value and what is allowed — before any rule runs."""

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from elf.config import ConfigError
from elf.validate import parse_experiment

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["config.yaml", "ci.yaml", "paper.yaml"])
def test_shipped_configs_validate(name):
    exp = parse_experiment(yaml.safe_load((ROOT / "config" / name).read_text()))
    for run in exp.runs:
        exp.run(run)


def _base():
    return yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["run_defaults"]["budget"].update(stepz=3), ["budget.stepz", "unknown", "allowed keys"]),
    (lambda c: c["samplers"]["sde8"].update(steps="eight"), ["samplers.sde8.steps", "'eight'", "integer"]),
    (lambda c: c["samplers"]["sde8"].update(method="heun"), ["samplers.sde8.method", "'heun'", "'ode'"]),
    (lambda c: c["run_defaults"]["objective"].update(decode_prob=1.5) if "objective" in c["run_defaults"]
     else c["run_defaults"].update(objective={"decode_prob": 1.5}), ["decode_prob", "1.5", "<= 1"]),
    (lambda c: c["evaluation"].update(n_samples=0), ["evaluation.n_samples", "0", ">= 1"]),
    (lambda c: c["figures"]["F4"].update(runs=["nope"]), ["figures.F4.runs", "'nope'"]),
    (lambda c: c["embeddings"]["encoder"].update(kind="learned"), ["embeddings.encoder", "learned",
                                                                     "cannot be cached"]),
    (lambda c: c["embeddings"]["encoder"].update(cache=False), ["embeddings.encoder",
                                                                  "normalization: fixed"]),
])
def test_bad_values_name_key_value_and_allowed(mutate, expected):
    cfg = copy.deepcopy(_base())
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        parse_experiment(cfg)
    for fragment in expected:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_snakemake_stops_before_any_rule_on_a_bad_config(tmp_path):
    cfg = _base()
    cfg["samplers"]["sde8"]["gamma"] = -1.0
    cfg["results"], cfg["reports"] = str(tmp_path / "results"), str(tmp_path / "reports")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(["snakemake", "-n", "--configfile", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "samplers.sde8.gamma" in proc.stderr + proc.stdout and "-1.0" in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


def test_paper_two_stage_runs_name_the_decoder_of_their_embedding_width():
    """F11: R15–R23 are denoisers only, decoded by the separate decoder trained on their embedding
    (R11: t5-small 512, R13: t5-base 768, R14: t5-large 1024), like R12 for F5b."""
    exp = parse_experiment(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    width_of = {"encoder": 512, "t5base": 768, "t5large": 1024}
    expected = {512: "R11", 768: "R13", 1024: "R14"}
    for name, dec in exp.decoders.items():
        assert dec.width == width_of[dec.embedding] and expected[dec.width] == name
    for number in range(15, 24):
        run = exp.run(f"R{number}")
        width = width_of[run.embedding]
        assert run.decoder == expected[width], run
        assert (run.model.decode_head, run.objective.decode_prob) == (False, 0.0)
        assert (run.model.conditioning, run.model.bottleneck) == ("adaln", width)
    assert [exp.run(f"R{n}").model.prediction for n in range(15, 24)] == ["x", "v", "eps"] * 3
    assert exp.run("R12").decoder == "R11"


def test_learned_embedding_run_r10_is_in_the_embedding_figure():
    for name, run_name in (("paper.yaml", "R10"), ("config.yaml", "emb_learned")):
        exp = parse_experiment(yaml.safe_load((ROOT / "config" / name).read_text()))
        run = exp.run(run_name)
        emb = exp.embeddings[run.embedding]
        assert (run.paper_run, emb.kind, emb.cache, emb.normalization) == ("R10", "learned", False, "fixed")
        assert run.model.decode_head and run_name in exp.figures["F5a"].runs


def test_the_validators_size_and_figure_names_are_the_models_and_the_reports():
    """elf/config.py and elf/validate.py name these without importing torch or the report."""
    from elf.config import BUILTIN_SIZES
    from elf.model import SIZES
    from elf.report.registry import FIGURES, TABLES
    from elf.validate import CONDITIONAL_METRIC_IDS

    assert tuple(SIZES) == BUILTIN_SIZES
    assert all(fid in FIGURES or fid in TABLES for fid in CONDITIONAL_METRIC_IDS)


def test_to_dict_is_the_json_round_trip_of_asdict():
    """``elf.typed.to_dict`` (written for planning speed) gives exactly what JSON makes of
    ``dataclasses.asdict`` for every run of the paper config, and refuses what JSON refuses."""
    import dataclasses
    import json

    from elf.typed import to_dict

    exp = parse_experiment(yaml.safe_load((Path(__file__).parents[1] / "config" / "paper.yaml").read_text()))
    for name in exp.runs:
        run = exp.run(name)
        assert to_dict(run) == json.loads(json.dumps(dataclasses.asdict(run))), name
    assert to_dict({2: (1, 2.5), None: True}) == {"2": [1, 2.5], "null": True}
    with pytest.raises(TypeError, match="Path is not JSON serializable"):
        to_dict({"where": Path("x")})
