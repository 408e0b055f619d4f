"""The review's verdict (elf/report/verdict.py) and the per-sample standard errors it reads
(elf/evaluate/uncertainty.py, elf/evaluate/aggregate.py), on hand-derived numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elf.evaluate.aggregate import aggregate_metrics
from elf.evaluate.uncertainty import bleu_bootstrap_se, mean_se, ratio_ppl_se, seed_mean_se
from elf.report import verdict
from elf.report.results import metric_columns, verdict_se
from elf.report.review import split_text
from elf.report.verdict import CONSISTENT, INCONSISTENT, UNRESOLVED, judge


# --------------------------------------------------------------------------------------------------
# Standard errors from the samples
# --------------------------------------------------------------------------------------------------

def test_ratio_ppl_se_by_hand():
    # R = (2 + 4) / 2 = 3; residuals −1, +1; sqrt(2 / (2·1)) / mean count 1 = 1; × e³
    assert ratio_ppl_se([2.0, 4.0], [1, 1]) == pytest.approx(math.exp(3.0))
    # equal counts c: exp(mean NLL per token) × SD(nll / c) / sqrt(n)
    nll, c = np.array([10.0, 14.0, 12.0, 20.0]), 4
    expected = math.exp(nll.sum() / (4 * c)) * np.std(nll / c, ddof=1) / 2
    assert ratio_ppl_se(nll.tolist(), [c] * 4) == pytest.approx(expected)
    assert math.isnan(ratio_ppl_se([3.0], [2]))          # one sample: no spread
    assert math.isnan(ratio_ppl_se([3.0, 1.0], [2, 0]))   # a sample without a counted target is left out


def test_ratio_ppl_se_matches_the_spread_of_independent_sample_sets():
    """The delta-method SE is the SD of the corpus PPL across many independent sample sets."""
    rng = np.random.default_rng(0)
    def draw(n=200):
        counts = rng.integers(5, 40, n)
        nll = counts * rng.normal(3.0, 0.6, n)   # per-token NLL varies between samples
        return nll, counts
    ppls = [math.exp(n.sum() / c.sum()) for n, c in (draw() for _ in range(400))]
    nll, counts = draw()
    assert ratio_ppl_se(nll.tolist(), counts.tolist()) == pytest.approx(np.std(ppls), rel=0.2)


def test_mean_and_seed_mean_se_by_hand():
    assert mean_se([1.0, 2.0, 3.0, None]) == pytest.approx(1 / math.sqrt(3))
    assert math.isnan(mean_se([1.0]))
    assert seed_mean_se([3.0, 4.0]) == pytest.approx(2.5)
    assert seed_mean_se([0.7]) == 0.7 and seed_mean_se([1.0, None]) is None


def test_bleu_bootstrap_se_is_seeded_and_zero_when_every_sentence_is_perfect():
    same = ["the cat sat on the mat", "a dog ran in the park today"] * 5
    assert bleu_bootstrap_se(same, same) == pytest.approx(0.0, abs=1e-9)
    hyps = ["the cat sat on the mat", "a dog ran", "birds fly south in winter", "no idea at all"] * 4
    refs = ["the cat sat on a mat", "a dog ran in the park", "birds fly south in winter", "it rains"] * 4
    se = bleu_bootstrap_se(hyps, refs, seed=3)
    assert se > 0 and se == bleu_bootstrap_se(hyps, refs, seed=3) and se != bleu_bootstrap_se(hyps, refs, seed=4)


def test_aggregate_attaches_the_seed_mean_se_of_the_samples_spread():
    one = aggregate_metrics({"0": {"gen_ppl": 30.0, "gen_ppl_se": 1.5}})
    assert one["gen_ppl"]["se"] == 0.0 and one["gen_ppl"]["se_samples"] == 1.5
    two = aggregate_metrics({"0": {"gen_ppl": 30.0, "gen_ppl_se": 3.0},
                             "1": {"gen_ppl": 32.0, "gen_ppl_se": 4.0}})
    assert two["gen_ppl"]["se_samples"] == pytest.approx(2.5)   # sqrt(9 + 16) / 2
    columns = metric_columns(two)
    assert columns["gen_ppl_sample_se"] == pytest.approx(2.5) and columns["gen_ppl_se"] == pytest.approx(1.0)
    assert verdict_se(columns, "gen_ppl") == pytest.approx(2.5)     # the larger of seed and sample SE
    columns["gen_ppl_sample_se"] = 0.4
    assert verdict_se(columns, "gen_ppl") == pytest.approx(1.0)
    assert verdict_se(metric_columns(one), "gen_ppl") == 1.5          # one seed: the samples' SE only


# --------------------------------------------------------------------------------------------------
# The verdict
# --------------------------------------------------------------------------------------------------

def test_printed_paper_se_gives_a_two_sigma_band():
    assert judge(10.0, 9.0, 0.3, 0.4)["verdict"] == CONSISTENT        # σ 0.5, band 1.0, |d| 1.0
    r = judge(10.0, 8.9, 0.3, 0.4)
    assert r["verdict"] == INCONSISTENT and r["diff"] == pytest.approx(1.1) and r["band"] == pytest.approx(1.0)


def test_no_printed_se_assumes_the_paper_carries_our_protocol_noise():
    r = judge(10.0, 9.5, 0.2, math.nan)                               # σ = 0.2·√2, band 0.566
    assert r["basis"] == "assumed = ours" and r["se_paper"] == 0.2 and r["verdict"] == CONSISTENT
    assert judge(10.0, 9.3, 0.2, math.nan)["verdict"] == INCONSISTENT


def test_readme_values_take_the_authors_tolerance():
    r = judge(27.0, 26.7, 0.1, math.nan, "README", "bleu")            # band 0.2 + 0.5
    assert r["basis"] == "authors' tolerance" and r["band"] == pytest.approx(0.7) and r["verdict"] == CONSISTENT
    assert judge(27.5, 26.7, 0.1, math.nan, "README", "bleu")["verdict"] == INCONSISTENT
    assert judge(25.0, 24.1, 0.2, math.nan, "README", "gen_ppl")["verdict"] == CONSISTENT   # ≲ 1 PPL


def test_too_noisy_or_no_se_is_not_resolved():
    r = judge(100.0, 80.0, 20.0, math.nan)                            # σ 28 > 0.25 × 80
    assert r["verdict"] == UNRESOLVED and "too noisy" in r["reason"]
    assert judge(9.5, 9.5, math.nan, math.nan)["verdict"] == CONSISTENT  # equal to every digit
    r = judge(10.0, 9.5, math.nan, math.nan)
    assert r["verdict"] == UNRESOLVED and r["reason"] == "no SE of ours"


def test_counts_and_the_rule_text():
    assert verdict.counts([CONSISTENT, CONSISTENT, UNRESOLVED]) == {CONSISTENT: 2, INCONSISTENT: 0,
                                                                    UNRESOLVED: 1}
    assert "se_paper := se_ours" in verdict.VERDICT_RULE and "not resolved" in verdict.VERDICT_RULE
    assert split_text(math.nan) == "–" and split_text(None) == "–" and split_text("test") == "test"
