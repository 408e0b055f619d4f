"""Trend checks (elf/report/trends.py): the verdict from both spreads, computed by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from elf import pairs
from elf.config import ConfigError
from elf.validate import parse_experiment
from elf.report.trends import FAILS, HOLDS, UNRESOLVED, check_trends, seed_spread_markdown, trends_markdown


def config(replicates: int = 2) -> dict:
    runs = {"base": {}, "student": {}}
    runs |= {f"base_s{k}": {"replicate_of": "base", "budget": {"seed": 100 + k}} for k in range(replicates)}
    return {
        "datasets": {"owt": {"task": "unconditional", "source": "embedded", "name": "owt", "max_length": 8}},
        "embeddings": {"encoder": {"kind": "encoder", "encoder": "main"}},
        "encoders": {"main": {"source": "build"}},
        "run_defaults": {"dataset": "owt"},
        "runs": runs,
        "samplers": {"few": {"method": "ode", "steps": 2}, "many": {"method": "ode", "steps": 8},
                     "mid": {"method": "ode", "steps": 4}},
        "evaluation": {"seeds": [0, 1, 2]},
        "figures": {"F5c": {"kind": "figure", "title": "t", "runs": ["base"], "samplers": ["few", "mid"]}},
        "trends": {"steps": {"claim": "more steps lower Gen. PPL", "lower": {"run": "base", "sampler": "many"},
                             "higher": {"run": "base", "sampler": "few"}},
                   "pd": {"claim": "student below teacher", "lower": {"run": "student", "sampler": "few"},
                          "higher": {"run": "base", "sampler": "few"}}},
    }


def frame(values: dict[tuple[str, str], tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"run": r, "sampler": s, "gen_ppl": v, "gen_ppl_se": se, "gen_ppl_n": 3}
                         for (r, s), (v, se) in values.items()])


def results(values, replicates=2):
    exp = parse_experiment(config(replicates))
    return {r.name: r for r in check_trends(frame(values), exp)}, exp


def test_paired_check_holds_when_every_training_seed_agrees_beyond_both_spreads():
    values = {("base", "many"): (30.0, 1.0), ("base", "few"): (40.0, 1.0),
              ("base_s0", "many"): (31.0, 1.0), ("base_s0", "few"): (42.0, 1.0),
              ("base_s1", "many"): (29.0, 1.0), ("base_s1", "few"): (41.0, 1.0),
              ("student", "few"): (35.0, 1.0)}
    got, _ = results(values)
    r = got["steps"]
    assert r.per_seed == (-10.0, -11.0, -12.0) and r.delta == pytest.approx(-11.0)
    assert r.eval_se == pytest.approx(math.sqrt(3 / 9 + 3 / 9))      # mean of 3 seeds each side
    assert r.train_se == pytest.approx(1.0 / math.sqrt(3))          # SD(−10, −11, −12) = 1
    assert r.training_seeds == 3 and r.verdict == HOLDS


def test_paired_check_is_not_resolved_when_a_seed_disagrees_or_the_margin_is_not_met():
    base = {("base", "many"): (30.0, 1.0), ("base", "few"): (40.0, 1.0),
            ("base_s0", "many"): (31.0, 1.0), ("base_s0", "few"): (42.0, 1.0),
            ("base_s1", "many"): (44.0, 1.0), ("base_s1", "few"): (41.0, 1.0),
            ("student", "few"): (35.0, 1.0)}
    got, _ = results(base)
    assert got["steps"].per_seed[2] > 0 and got["steps"].verdict == UNRESOLVED
    # every seed agrees (Δ_k = −3) but the evaluation spread is wide: margin 2·√(3·9/9 + 3·9/9) ≈ 4.9
    agree = {("base", "many"): (37.0, 3.0), ("base", "few"): (40.0, 3.0),
             ("base_s0", "many"): (39.0, 3.0), ("base_s0", "few"): (42.0, 3.0),
             ("base_s1", "many"): (38.0, 3.0), ("base_s1", "few"): (41.0, 3.0),
             ("student", "few"): (35.0, 1.0)}
    got, _ = results(agree)
    assert got["steps"].per_seed == (-3.0, -3.0, -3.0) and got["steps"].eval_se == pytest.approx(6 ** 0.5)
    assert got["steps"].verdict == UNRESOLVED


def test_reversed_difference_does_not_hold():
    values = {("base", "many"): (50.0, 0.5), ("base", "few"): (40.0, 0.5),
              ("base_s0", "many"): (52.0, 0.5), ("base_s0", "few"): (41.0, 0.5),
              ("base_s1", "many"): (51.0, 0.5), ("base_s1", "few"): (40.0, 0.5),
              ("student", "few"): (35.0, 0.5)}
    got, _ = results(values)
    assert got["steps"].verdict == FAILS


def test_unpaired_check_adds_the_replicated_sides_training_spread():
    values = {("base", "few"): (40.0, 1.0), ("base_s0", "few"): (42.0, 1.0), ("base_s1", "few"): (44.0, 1.0),
              ("student", "few"): (30.0, 2.0), ("base", "many"): (1.0, 0.0), ("base_s0", "many"): (1.0, 0.0),
              ("base_s1", "many"): (1.0, 0.0)}
    got, _ = results(values)
    r = got["pd"]
    assert r.delta == pytest.approx(30.0 - 42.0) and r.per_seed == ()
    assert r.eval_se == pytest.approx(math.sqrt(4.0 + 3 / 9))
    assert r.train_se == pytest.approx(2.0 / math.sqrt(3))           # base: SD(40, 42, 44) = 2
    assert r.verdict == HOLDS and "training spread unmeasured: student trained once" in r.note


def test_without_replicates_the_evaluation_spread_alone_decides_and_says_so():
    values = {("base", "many"): (30.0, 1.0), ("base", "few"): (33.0, 1.0), ("student", "few"): (1, 0)}
    got, _ = results(values, replicates=0)
    r = got["steps"]
    assert math.isnan(r.train_se) and r.verdict == HOLDS and "training spread unmeasured" in r.note
    values[("base", "few")] = (32.0, 1.0)                           # Δ = −2 < 2·√2 ≈ 2.83
    assert results(values, replicates=0)[0]["steps"].verdict == UNRESOLVED


def test_missing_numbers_are_not_resolved_and_the_markdown_counts_verdicts():
    got, exp = results({("base", "many"): (30.0, 1.0)}, replicates=0)
    assert got["steps"].verdict == UNRESOLVED and got["steps"].note == "no data"
    text = trends_markdown(list(got.values()))
    assert text.startswith("0 of 2 checks resolve") and "| more steps lower Gen. PPL |" in text


def test_replicates_are_evaluated_on_their_runs_compared_samplers_and_spread_is_tabulated():
    exp = parse_experiment(config())
    assert pairs.run_samplers(exp, "base") == ["few", "mid", "many"]
    # a replicate: only what base's trend checks compare ("mid" is a figure's alone)
    assert pairs.run_samplers(exp, "base_s0") == ["few", "many"]
    assert pairs.seeds_of(exp, "base_s1", "many") == (0, 1, 2)       # a trend pair: every seed
    assert ("base_s1", "many") in pairs.review_pairs(exp) and ("base_s1", "mid") not in pairs.review_pairs(exp)
    values = {(r, s): (10.0 + i, 0.5) for i, (r, s) in enumerate(pairs.review_pairs(exp))}
    text = seed_spread_markdown(frame(values), exp, metrics=("gen_ppl",))
    assert "Training seeds of `base`: base (seed 42), base_s0 (seed 100), base_s1 (seed 101)" in text
    assert "| few | gen_ppl |" in text and "| many | gen_ppl |" in text and "| mid |" not in text


def test_replicate_samplers_adds_samplers_to_the_replicates_and_must_exist():
    cfg = config()
    cfg["evaluation"]["replicate_samplers"] = ["mid"]
    exp = parse_experiment(cfg)
    assert pairs.run_samplers(exp, "base_s1") == ["few", "mid", "many"]
    assert ("base_s1", "mid") in pairs.review_pairs(exp)
    cfg["evaluation"]["replicate_samplers"] = ["nope"]
    with pytest.raises(ConfigError, match="replicate_samplers.*'nope' is not defined"):
        parse_experiment(cfg)


@pytest.mark.parametrize("change, words", [
    ({"replicate_of": "nope"}, "another run"),
    ({"replicate_of": "base", "budget": {"seed": 42}}, "another seed"),
    ({"replicate_of": "base", "budget": {"seed": 7}, "model": {"bottleneck": 8}}, "differs from it in model"),
])
def test_bad_replicates_are_refused(change, words):
    cfg = config(0)
    cfg["runs"]["bad"] = change
    with pytest.raises(ConfigError, match=words):
        parse_experiment(cfg)


def test_a_trend_naming_an_unknown_pair_is_refused():
    cfg = config(0)
    cfg["trends"]["steps"]["lower"]["sampler"] = "nope"
    with pytest.raises(ConfigError, match="trends.steps.lower.sampler"):
        parse_experiment(cfg)


def test_a_side_whose_evaluation_se_exceeds_the_noise_fraction_is_too_wide_to_resolve():
    """ode4-like samplers (88 ± 30): a quarter of the value is the limit, whatever Δ is."""
    values = {("base", "many"): (88.0, 30.0), ("base", "few"): (400.0, 10.0), ("student", "few"): (1, 0)}
    r = results(values, replicates=0)[0]["steps"]
    assert r.delta == -312.0 and r.verdict == UNRESOLVED and "spread too wide" in r.note
    values[("base", "many")] = (88.0, 21.0)                         # 21 < 0.25 × 88 = 22
    r = results(values, replicates=0)[0]["steps"]
    assert r.verdict == HOLDS and "spread too wide" not in r.note


def test_the_conservative_se_takes_the_samples_own_spread_when_it_is_larger():
    values = {("base", "many"): (30.0, 0.1), ("base", "few"): (33.0, 0.1), ("student", "few"): (1, 0)}
    data = frame(values)
    data["gen_ppl_sample_se"] = [1.2, 1.6, 0.0]
    r = {t.name: t for t in check_trends(data, parse_experiment(config(0)))}["steps"]
    assert r.eval_se == pytest.approx(2.0) and r.verdict == UNRESOLVED   # margin 4 > |−3|
    data["gen_ppl_n"] = 1                                               # one seed: only the samples' SE
    data["gen_ppl_sample_se"] = [0.3, 0.4, 0.0]
    r = {t.name: t for t in check_trends(data, parse_experiment(config(0)))}["steps"]
    assert r.eval_se == pytest.approx(0.5) and r.verdict == HOLDS


def test_the_cost_of_replicates_is_steps_times_batch_times_length_at_the_stated_throughput():
    from elf.report.trends import SLOTS_PER_GPU_HOUR_B, replicate_gpu_hours

    cfg = config(0)
    cfg["run_defaults"]["budget"] = {"steps": 1000, "batch_size": 4}
    cfg["runs"]["base"] = {"model": {"size": "ELF-B"}}
    exp = parse_experiment(cfg)
    assert replicate_gpu_hours(exp, "base") == pytest.approx(2 * 1000 * 4 * 8 / SLOTS_PER_GPU_HOUR_B)
    assert SLOTS_PER_GPU_HOUR_B == pytest.approx(19_000 * 512 * 1024 / 32)   # the authors' 4 h / epoch


def test_an_equal_claim_holds_within_a_tenth_and_fails_beyond_it():
    cfg = config(0)
    cfg["trends"] = {"same": {"claim": "shared ≈ separate", "relation": "equal",
                              "lower": {"run": "base", "sampler": "many"}, "higher": {"run": "student", "sampler": "many"}}}
    exp = parse_experiment(cfg)
    def verdict(a, b, se=0.5):
        return check_trends(frame({("base", "many"): (a, se), ("student", "many"): (b, se)}), exp)[0].verdict
    # margin 2·sqrt(2·0.25) = 1.41; tolerance 0.1 × 40 = 4
    assert verdict(40.0, 41.0) == HOLDS            # 1 + 1.41 ≤ 4.05
    assert verdict(36.0, 44.0) == FAILS            # 8 − 1.41 > 4
    assert verdict(38.0, 42.0) == UNRESOLVED       # 4 + 1.41 > 4, 4 − 1.41 < 4


def test_a_figure_can_name_its_pairs_one_sampler_per_run():
    """F8's form: each run with its own sampler, not every run with every sampler."""
    cfg = config(0)
    cfg["figures"]["F8"] = {"kind": "figure", "title": "t", "runs": ["base", "student"],
                            "samplers": ["few", "many"],
                            "pairs": [{"run": "base", "sampler": "many"}, {"run": "student", "sampler": "few"}]}
    exp = parse_experiment(cfg)
    assert pairs.figure_pairs(exp, "F8") == [("base", "many"), ("student", "few")]
    assert ("base", "few") in pairs.review_pairs(exp) and ("student", "many") not in pairs.review_pairs(exp)
    cfg["figures"]["F8"]["pairs"].append({"run": "base", "sampler": "mid"})
    with pytest.raises(ConfigError, match="figures.F8.pairs.*base/mid"):
        parse_experiment(cfg)


def test_the_paper_configs_claims_each_get_a_verdict_and_the_cost_of_their_training_spread():
    import yaml
    from pathlib import Path

    exp = parse_experiment(yaml.safe_load((Path(__file__).resolve().parents[1] / "config" /
                                           "paper.yaml").read_text()))
    assert len(exp.trends) >= 25
    rows = [{"run": r, "sampler": s, "gen_ppl": 30.0 + i, "gen_ppl_se": 0.2, "gen_ppl_n": 6,
             "entropy": 5.0, "entropy_se": 0.01, "entropy_n": 6, "bleu": 25.0 + i / 10, "bleu_se": 0.1,
             "bleu_n": 6, "rouge1": 35.0, "rouge1_se": 0.1, "rouge1_n": 6}
            for i, (r, s) in enumerate(pairs.trend_pairs(exp))]
    results = check_trends(pd.DataFrame(rows), exp)
    assert len(results) == len(exp.trends) and all(r.note != "no data" for r in results)
    text = trends_markdown(results)
    for trend in exp.trends.values():
        assert f"| {trend.claim} |" in text
    r01 = next(r for r in results if r.name == "sc_cfg_ppl")   # R01 trained once: 2 × 5 epochs × 32 h
    assert "training spread unmeasured: R01 trained once; 2 more training seeds ≈ 320 GPU-hours" in r01.note
