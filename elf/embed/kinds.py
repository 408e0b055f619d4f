"""The embedding kinds that turn token ids into ELF's clean embeddings x (spec §2, §8).

Every kind is an ``Embedder``: ``forward(input_ids, attention_mask, cond_seq_mask, drop_source)`` returns
RAW (unnormalised) float32 embeddings (B, L, dim); ``elf.embed.normalise`` applies the configured
statistics.

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
