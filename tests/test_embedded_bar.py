"""benchmarks/embedded_bar.py's conditional (source-blind) and grammar sections on made samples."""

import sys
from pathlib import Path

import pytest
import yaml

from elf import pairs, plan
from elf.artifacts.records import write_samples
from elf.validate import parse_experiment

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import embedded_bar  # noqa: E402

REFS = ["Three hikers rest.", "A fox hides.", "The owls are wild.", "Two cows graze."]


@pytest.fixture
def exp():
    return parse_experiment(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))


def write(exp, evals, run, sampler, texts, refs=None):
    for seed in pairs.seeds_of(exp, run, sampler):
        rows = [dict(i=i, text=t, **({"reference": refs[i], "source": "s"} if refs else {}))
                for i, t in enumerate(texts)]
        write_samples(plan.samples_file(evals, exp, run, sampler, seed), {"seed": seed}, rows)


def test_conditional_section_compares_each_run_with_its_source_blind_score(exp, tmp_path):
    write(exp, tmp_path, "wmt", "cond_cfg2", REFS, REFS)          # perfect translations
    text = embedded_bar.conditional_markdown(exp, tmp_path, ["wmt"], "cond_cfg2")
    row = next(line for line in text.splitlines() if line.startswith("| wmt | bleu"))
    score, blind = (float(c) for c in row.split("|")[3:5])
    assert score == pytest.approx(100.0) and blind < 20
    assert "goal: wmt BLEU ≥ 20 and ≥ 5× source-blind: met" in text
    write(exp, tmp_path, "wmt", "cond_cfg2", REFS[1:] + REFS[:1], REFS)  # another example's
    assert "source-blind: NOT met" in embedded_bar.conditional_markdown(exp, tmp_path, ["wmt"], "cond_cfg2")


def test_grammar_section_counts_accepted_sentences_of_every_training_seed(exp, tmp_path):
    for run in pairs.training_seed_runs(exp, "base"):
        write(exp, tmp_path, run, "sde32", ["The fox hides. The stone think.", "the owl. It hid."])
    args = type("A", (), dict(run="base", sampler="sde32"))
    held_out = (["A fox hides. It is wild."], ["wild fox. hides a It is."])
    text = embedded_bar.grammar_markdown(exp, tmp_path, args, held_out=held_out)
    base = next(line for line in text.splitlines() if line.startswith("| base samples"))
    # per seed: "The fox hides." yes, "The stone think." no, "It hid." yes ("the owl." starts lower-case)
    n = len(pairs.seeds_of(exp, "base", "sde32"))
    assert base.split("|")[2:4] == [f" {3 * n} ", " 0.667 "]
    assert "| held-out rows (ceiling) | 2 | 1.000 | 1 | 1.000 |" in text


def write_aggregate(exp, evals, run, sampler, gen_ppl, entropy, se=0.1):
    import json
    path = plan.aggregate_path(evals, exp, run, sampler)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metrics": {"gen_ppl": {"mean": gen_ppl, "se": se},
                                            "entropy": {"mean": entropy, "se": se / 10}}}))


@pytest.mark.parametrize("high, se, verdict", [
    ((30.0, 3.35), 0.1, "met (Gen. PPL: met; entropy: not met)"),          # PPL -25 %, entropy -0.05
    ((38.0, 3.25), 0.1, "met (Gen. PPL: not met; entropy: met)"),          # PPL -5 %, entropy -0.15
    ((38.0, 3.35), 0.1, "NOT met (Gen. PPL: not met; entropy: not met)"),
    ((30.0, 3.25), 20.0, "NOT met (Gen. PPL: not met; entropy: not met)"),  # both within 2 SE
])
def test_guidance_section_states_the_sc_cfg_goal(exp, tmp_path, high, se, verdict):
    args = type("A", (), dict(run="base", sc_low="ode16_w0.5", sc_high="ode16_w3"))
    for run in pairs.training_seed_runs(exp, "base"):
        write_aggregate(exp, tmp_path, run, "ode16_w0.5", 40.0, 3.40, se)
        write_aggregate(exp, tmp_path, run, "ode16_w3", *high, se)
    text = embedded_bar.guidance_markdown(exp, tmp_path, args)
    assert "| base | 40.00 → " in text and "| mean over training seeds | 40.00 → " in text
    assert text.rstrip().endswith(verdict)
