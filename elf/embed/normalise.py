"""Normalisation of clean embeddings (spec §2: x = (enc − mean) / std): the statistics, streamed
over a store's valid tokens, and the map both ways.

Torch only: reading a cached store (training, sampling) does not import an encoder's code.
"""

from __future__ import annotations

import torch

# A degenerate channel (std 0) is divided by this instead, leaving its centred values at 0.
MIN_STD = 1e-6


class StatsAccumulator:
    """Streaming mean/std over valid tokens, float64, merged chunk by chunk (Chan et al.'s parallel
    variance), so a large store can be summarised without holding it. Standard deviations are the
    population ones (divide by the count)."""

    def __init__(self):
        self.count = 0
        self.mean: torch.Tensor | None = None  # (d,)
        self.m2: torch.Tensor | None = None  # (d,) sum of squared deviations

    def update(self, emb: torch.Tensor, mask: torch.Tensor) -> None:
        """Add the tokens of ``emb`` (..., L, d) where ``mask`` (..., L) is nonzero."""
        values = emb.reshape(-1, emb.shape[-1])[mask.reshape(-1) > 0].double()  # (n, d)
        n = values.shape[0]
        if n == 0:
            return
        mean = values.mean(0)
        m2 = ((values - mean) ** 2).sum(0)
        if self.count == 0:
            self.count, self.mean, self.m2 = n, mean, m2
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta ** 2 * (self.count * n / total)
        self.count = total

    def result(self) -> dict:
        """``scalar_mean``, ``scalar_std`` (floats, over all channels of all valid tokens),
        ``channel_mean``, ``channel_std`` ((d,) float64 tensors), and ``count`` (valid tokens)."""
        if self.count == 0:
            raise ValueError("no valid tokens to compute normalisation statistics from")
        channel_var = self.m2 / self.count
        scalar_mean = self.mean.mean()
        # every channel has the same count, so the pooled variance is the mean of the channel variances
        # plus the spread of the channel means around the pooled mean
        scalar_var = (channel_var + (self.mean - scalar_mean) ** 2).mean()
        return {"scalar_mean": scalar_mean.item(), "scalar_std": scalar_var.sqrt().item(),
                "channel_mean": self.mean.clone(), "channel_std": channel_var.sqrt(),
                "count": self.count}


def normalisation_stats(embeddings: torch.Tensor, valid_mask: torch.Tensor) -> dict:
    """Statistics of ``embeddings`` (N, L, d) over the tokens where ``valid_mask`` (N, L) is nonzero
    (see ``StatsAccumulator.result``)."""
    accumulator = StatsAccumulator()
    accumulator.update(embeddings, valid_mask)
    return accumulator.result()


def _mean_std(stats: dict | None, mode: str, fixed_mean: float, fixed_std: float):
    if mode == "fixed":
        return fixed_mean, fixed_std
    if stats is None:
        raise ValueError(f"normalisation mode '{mode}' needs statistics of the training data")
    if mode == "scalar":
        return stats["scalar_mean"], max(stats["scalar_std"], MIN_STD)
    if mode == "per_channel":
        mean = torch.as_tensor(stats["channel_mean"], dtype=torch.float64)
        std = torch.as_tensor(stats["channel_std"], dtype=torch.float64).clamp_min(MIN_STD)
        return mean, std
    raise ValueError(f"unknown normalisation mode {mode!r} (fixed, scalar, per_channel)")


def normalise(emb: torch.Tensor, stats: dict | None, mode: str, fixed_mean: float = 0.0,
              fixed_std: float = 0.2) -> torch.Tensor:
    """``(emb − mean) / std`` with the mean/std that ``mode`` selects: ``fixed`` (the released configs:
    0.0, 0.2), ``scalar`` or ``per_channel`` (from ``stats``). Keeps ``emb``'s dtype."""
    mean, std = _mean_std(stats, mode, fixed_mean, fixed_std)
    if isinstance(mean, torch.Tensor):
        mean, std = mean.to(emb.device, emb.dtype), std.to(emb.device, emb.dtype)
    return (emb - mean) / std


def denormalise(x: torch.Tensor, stats: dict | None, mode: str, fixed_mean: float = 0.0,
                fixed_std: float = 0.2) -> torch.Tensor:
    """The inverse of ``normalise``: ``x · std + mean``."""
    mean, std = _mean_std(stats, mode, fixed_mean, fixed_std)
    if isinstance(mean, torch.Tensor):
        mean, std = mean.to(x.device, x.dtype), std.to(x.device, x.dtype)
    return x * std + mean
