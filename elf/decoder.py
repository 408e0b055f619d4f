"""The separate decoder of the "shared vs separate decoder" ablation (paper Fig. 5b; runs R11, R12).

A small bidirectional transformer that maps clean (normalised) embeddings (B, L, d) to token logits
(B, L, V): a mirror of the frozen encoder (same depth, width and heads, randomly initialised), built
from the ELF network's blocks (pre-RMSNorm, qk-norm attention with RoPE, SwiGLU; ``elf.model``):

    h = in_proj(x)                              # d → width
    h = blocks(h)                               # bidirectional, no control tokens
    logits = out_proj(rms(h))                   # width → vocab

Training objective (spec §8: frozen encoder, 20% token masking, logit-normal corruption P_mean 0.5,
P_std 1.0, relative noise scale 5): per token, ``λ = sigmoid(N(0.5, 1.0²))`` and
``x̃ = λ·x + (1 − λ)·5·ε``; then 20% of the tokens are masked, i.e. replaced by a learned mask
embedding. Loss = token cross-entropy on valid target positions. Every random quantity of a step is
drawn in ``draw_corruption`` and can be passed in by hand (``DecoderDraws``). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from elf.flow.paths import interpolate, logit_normal
from elf.model import Block, ModelConfig, RMSNorm, RopeCache


@dataclass(frozen=True)
class DecoderConfig:
    d: int = 512            # embedding width (input)
    width: int = 512        # T5-small mirror: 512 wide, 6 layers, 8 heads
    layers: int = 6
    heads: int = 8
    vocab_size: int = 32128
    max_length: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def block_config(self) -> ModelConfig:
        """The ELF block settings of this width (in-context blocks: no adaLN)."""
        return ModelConfig(depth=self.layers, width=self.width, heads=self.heads, d=self.d,
                           vocab_size=self.vocab_size, max_length=self.max_length,
                           rope_theta=self.rope_theta, norm_eps=self.norm_eps)


class SeparateDecoder(nn.Module):
    """Embeddings (B, L, d) → logits (B, L, V); ``mask`` (B, L) bool replaces those positions' input
    by the learned mask embedding (training corruption only)."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        block_cfg = cfg.block_config()
        self.mask_embedding = nn.Parameter(torch.zeros(cfg.d))
        self.in_proj = nn.Linear(cfg.d, cfg.width)
        self.blocks = nn.ModuleList(Block(block_cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.width, cfg.norm_eps)
        self.out_proj = nn.Linear(cfg.width, cfg.vocab_size)
        self.rope = RopeCache(cfg.width // cfg.heads, cfg.rope_theta, n_skip=0)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.mask_embedding, std=0.02)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            x = torch.where(mask[..., None], self.mask_embedding.to(x.dtype), x)
        h = self.in_proj(x)
        rope = self.rope(x.shape[1], h.device)
        for block in self.blocks:
            h = block(h, rope)
        return self.out_proj(self.norm(h))


@dataclass
class DecoderDraws:
    """One step's corruption: per-token mixing weight, unit noise, token mask."""
    lam: torch.Tensor     # (B, L) in (0, 1): weight of the clean embedding
    eps: torch.Tensor     # (B, L, d) unit normal
    mask: torch.Tensor    # (B, L) bool: replaced by the mask embedding

    def to(self, device) -> "DecoderDraws":
        return DecoderDraws(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


def draw_corruption(shape: tuple[int, int, int], mask_prob: float, noise_mean: float,
                    noise_std: float, generator: torch.Generator, device="cpu") -> DecoderDraws:
    """Draw one step's corruption on CPU from ``generator`` (device-independent)."""
    B, L, d = shape
    lam = logit_normal(torch.randn(B, L, generator=generator), noise_mean, noise_std)
    eps = torch.randn(B, L, d, generator=generator)
    mask = torch.rand(B, L, generator=generator) < mask_prob
    return DecoderDraws(lam, eps, mask).to(device)


def corrupt(x: torch.Tensor, draws: DecoderDraws, noise_scale: float) -> torch.Tensor:
    """x̃ = λ·x + (1 − λ)·σ·ε per token (the mask is applied inside the decoder)."""
    return interpolate(x, draws.eps, draws.lam, noise_scale)


def decoder_loss(decoder: SeparateDecoder, x: torch.Tensor, input_ids: torch.Tensor,
                 loss_mask: torch.Tensor, draws: DecoderDraws, noise_scale: float) -> torch.Tensor:
    """Mean token cross-entropy (fp32) over ``loss_mask`` of the decoder on corrupted ``x``."""
    logits = decoder(corrupt(x, draws, noise_scale), draws.mask).float()
    ce = F.cross_entropy(logits.transpose(1, 2), input_ids.long(), reduction="none")   # (B, L)
    return (ce * loss_mask).sum() / loss_mask.sum().clamp_min(1)
