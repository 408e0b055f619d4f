"""The learning diagnostics: repetition share, calibration texts (shuffled / unigram), and held-out
denoising error against the per-channel linear (Wiener) denoiser."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from elf.evaluate.calibration import corrupt_rows, shuffled_rows, unigram_rows
from elf.evaluate.denoise import channel_moments, denoise_errors, linear_denoise
from elf.evaluate.repetition import repetition, top_word_share


def test_top_word_share_by_hand():
    assert top_word_share("The fox saw the hen. The end.") == pytest.approx(3 / 7)
    assert top_word_share("a b c d") == pytest.approx(1 / 4)
    assert top_word_share(" . , ") is None
    result = repetition(["the the cat", "a b", "..."])
    assert result["repetition"] == pytest.approx((2 / 3 + 1 / 2) / 2) and result["n_empty"] == 1


def test_shuffled_rows_keep_each_rows_tokens():
    rows = [[5, 6, 7, 8, 9], [1, 1, 2], []]
    out = shuffled_rows(rows, torch.Generator().manual_seed(0))
    assert [sorted(r) for r in out] == [sorted(r) for r in rows]
    assert out != rows  # five distinct ids: the identity order has probability 1/120
    assert out == shuffled_rows(rows, torch.Generator().manual_seed(0))


def test_unigram_rows_keep_lengths_and_follow_the_frequencies():
    rows = [[3] * 90 + [4] * 10, [3, 4]]
    out = unigram_rows(rows, torch.Generator().manual_seed(1))
    assert [len(r) for r in out] == [100, 2]
    counts = Counter(i for r in out for i in r)
    assert set(counts) <= {3, 4} and 0.8 < counts[3] / 102 < 0.97


def test_corrupt_rows_refuses_an_unknown_corruption():
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt_rows([[1, 2]], how="reversed", seed=0)
    assert corrupt_rows([[1, 2, 3]], "shuffled", 4) == corrupt_rows([[1, 2, 3]], "shuffled", 4)


def test_linear_denoiser_has_the_closed_form_error():
    g = torch.Generator().manual_seed(0)
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([1.0, 0.3])
    x = mean + std * torch.randn(200_000, 2, generator=g)
    t, sigma = 0.3, 2.0
    z = t * x + (1 - t) * sigma * torch.randn(x.shape, generator=g)
    mse = (linear_denoise(z, t, sigma, mean, std ** 2) - x).pow(2).mean(0)
    var = std ** 2
    expected = var * (1 - t) ** 2 * sigma ** 2 / (t ** 2 * var + (1 - t) ** 2 * sigma ** 2)
    assert torch.allclose(mse, expected, rtol=0.02)
    # no other gain does better (a 10 % larger or smaller gain is worse)
    for scale in (0.9, 1.1):
        gain = scale * t * var / (t * t * var + (1 - t) ** 2 * sigma ** 2)
        assert ((mean + gain * (z - t * mean) - x).pow(2).mean(0) > mse).all()


class Stub(torch.nn.Module):
    """A 'network' returning a fixed function of its input half z (x-prediction)."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.p = fn, torch.nn.Parameter(torch.zeros(()))

    def forward(self, x_in, t, w):
        d = x_in.shape[-1] // 2
        return self.fn(x_in[..., :d], float(t[0])), None


def test_denoise_errors_of_an_oracle_and_of_the_linear_denoiser():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 5, 3, generator=g)
    valid = torch.ones(16, 5, dtype=torch.bool)
    valid[:, -1] = False
    mean, var = channel_moments(x, valid)
    assert torch.allclose(mean, x[:, :-1].reshape(-1, 3).mean(0))
    times = (0.2, 0.7)
    wiener = Stub(lambda z, t: linear_denoise(z, t, 1.0, mean, var))
    rows = denoise_errors(wiener, x, valid, times, 1.0, torch.Generator().manual_seed(3),
                          mean=mean, var=var, batch_size=5)
    assert [r["t"] for r in rows] == list(times)
    assert all(r["ratio"] == pytest.approx(1.0) for r in rows)
    assert rows[0]["mse"] > rows[1]["mse"] > 0  # less noise, smaller error
    zero = Stub(lambda z, t: torch.zeros_like(z))
    rows0 = denoise_errors(zero, x, valid, times, 1.0, torch.Generator().manual_seed(3),
                           mean=mean, var=var)
    expected = float(x[valid].pow(2).mean())
    assert all(math.isclose(r["mse"], expected, rel_tol=1e-5) for r in rows0)
