"""The embedding kinds that turn token ids into ELF's clean embeddings x (spec §2, §8), and their
normalisation.

Every kind is an ``Embedder``: ``forward(input_ids, attention_mask, cond_seq_mask, drop_source)`` returns
RAW (unnormalised) float32 embeddings (B, L, dim); ``normalise`` applies the configured statistics.

| kind (``EmbeddingSettings.kind``) | class | contextual | cacheable |
|---|---|---|---|
| ``encoder``     | ``ContextualEncoder``: T5 encoder last hidden state (after its final norm) | yes | yes |
| ``token_table`` | ``TokenTable``: the same encoder's token-embedding table | no | yes |
| ``gaussian``    | ``GaussianTable``: a frozen N(0, 1) table | no | yes |
| ``learned``     | none here: the decode head's unembedding, trained with the flow (``elf/train/learned.py``) | no | no |

No file I/O apart from ``build_embedder`` loading an encoder folder. The cache stage (``elf embed``) runs a
cacheable embedder over a packed dataset; kind ``learned`` is embedded by the training stage.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import T5Config, T5EncoderModel

from elf.config import EmbeddingSettings
from elf.embed.encoder import encoder_mask_4d, load_encoder

# A degenerate channel (std 0) is divided by this instead, leaving its centred values at 0.
MIN_STD = 1e-6


# --------------------------------------------------------------------------------------------------
# Embedders
# --------------------------------------------------------------------------------------------------

class Embedder(nn.Module):
    """Token ids → raw embeddings (B, L, dim) float32. ``cacheable``: frozen and deterministic, so its
    output may be computed once and stored."""
    dim: int
    cacheable: bool = True

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cond_seq_mask: torch.Tensor,
                drop_source: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ContextualEncoder(Embedder):
    """The T5 encoder's last hidden state, encoding ``[source ; target]`` with the per-query mask of
    ``encoder_mask_4d`` (plain bidirectional attention over valid tokens when there is no source)."""

    def __init__(self, encoder: T5EncoderModel):
        super().__init__()
        self.encoder = encoder.eval().requires_grad_(False)
        self.dim = encoder.config.d_model

    def train(self, mode: bool = True) -> "ContextualEncoder":
        super().train(mode)
        self.encoder.eval()  # frozen: its dropout must stay off whatever mode the parent is in
        return self

    def forward(self, input_ids, attention_mask, cond_seq_mask, drop_source):
        dtype = next(self.encoder.parameters()).dtype
        mask = encoder_mask_4d(attention_mask, cond_seq_mask, drop_source, dtype)  # (B, 1, L, L)
        hidden = self.encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, L, d)
        return hidden.float()


class _FrozenTable(Embedder):
    """A fixed (vocab, dim) lookup table kept as a buffer (saved with the module, never trained)."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.register_buffer("table", table.detach().float().clone())
        self.dim = table.shape[1]

    def forward(self, input_ids, attention_mask=None, cond_seq_mask=None, drop_source=None):
        return self.table[input_ids]  # (B, L, dim)


class TokenTable(_FrozenTable):
    """The encoder's token-embedding table (non-contextual), frozen."""

    def __init__(self, encoder: T5EncoderModel):
        super().__init__(encoder.get_input_embeddings().weight)


class GaussianTable(_FrozenTable):
    """A frozen N(0, 1) table drawn from a ``torch.Generator`` seeded with ``seed``."""

    def __init__(self, vocab: int, dim: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        super().__init__(torch.randn(vocab, dim, generator=generator))


def build_embedder(settings: EmbeddingSettings, encoder_path: str | None, vocab_size: int,
                   seed: int = 0, dim: int | None = None) -> Embedder:
    """The embedder ``settings.kind`` names. ``encoder_path`` (a hub id or saved folder) is required for
    ``encoder`` / ``token_table``; for ``gaussian`` it only sets the width (the paper compares kinds at
    the encoder's width), else pass ``dim``. Kind ``learned`` has no embedder (``elf/train/learned.py``). Raises ValueError when the encoder has fewer
    embedding rows than ``vocab_size``."""
    if settings.kind in ("encoder", "token_table"):
        if encoder_path is None:
            raise ValueError(f"embedding kind '{settings.kind}' needs an encoder path")
        encoder = load_encoder(encoder_path)
        rows = encoder.get_input_embeddings().num_embeddings
        if vocab_size > rows:
            raise ValueError(f"encoder {encoder_path!r} has {rows} embedding rows, fewer than the "
                             f"vocabulary size {vocab_size}")
        return ContextualEncoder(encoder) if settings.kind == "encoder" else TokenTable(encoder)
    if dim is None:
        if encoder_path is None:
            raise ValueError(f"embedding kind '{settings.kind}' needs `dim` or an encoder to take it from")
        from elf.hub import pretrained_kwargs

        name, kwargs = pretrained_kwargs(encoder_path, "encoder")
        dim = T5Config.from_pretrained(name, **kwargs).d_model
    if settings.kind == "gaussian":
        return GaussianTable(vocab_size, dim, seed)
    raise ValueError(f"unknown embedding kind {settings.kind!r}")


# --------------------------------------------------------------------------------------------------
# Normalisation statistics (spec §2: x = (enc − mean) / std)
# --------------------------------------------------------------------------------------------------

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
