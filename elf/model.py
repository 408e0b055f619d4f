"""The ELF network (spec §3): one transformer that denoises embeddings and, in decode mode, emits tokens.

Parameter names and layouts follow the authors' PyTorch checkpoints, so their released weights load
with ``load_state_dict`` directly (``elf.train.checkpoint.load_released``).

Forward, for input ``x_in = [z ; x_sc]`` (B, L, 2d), time ``t`` (B,), SC-CFG scale ``w`` (B,), mode gate (B,):
  h = proj2(proj1(self_cond_proj(x_in)))                          # (B, L, W), 128-d bottleneck
  prepend [time tokens, SC-CFG tokens, mode tokens · gate]        # (B, 12 + L, W)
  blocks: h += attn(rms(h)); h += swiglu(rms(h))                  # RoPE on text positions only
  x̂ = final_layer(h_text)                                         # zero-initialised head, (B, L, d)
  logits = unembed(gelu_tanh(h_text @ proj_kernel + proj_bias))   # decode head on un-normalised h_text

The adaLN-Zero variant (paper ablation, Fig. 14) conditions every block on time + SC-CFG + mode through
adaptive norms instead of prepending control tokens.

Precision (``elf.precision``): the input side (projections, embedders, control tokens) and both heads
run in fp32 with autocast off; only the blocks follow the caller's autocast (bf16 policy), so the
residual stream, x̂ and the logits are fp32 either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from elf.precision import full_precision


@dataclass(frozen=True)
class ModelConfig:
    depth: int = 12
    width: int = 768
    heads: int = 12
    d: int = 512                  # embedding width (T5-small: 512)
    bottleneck: int = 128
    vocab_size: int = 32128
    max_length: int = 1024
    num_time_tokens: int = 4
    num_cfg_tokens: int = 4
    num_mode_tokens: int = 4
    conditioning: str = "in_context"   # or "adaln"
    decode_head: bool = True
    time_freqs: int = 256
    max_period: float = 10000.0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def mlp_hidden(self) -> int:
        return int(4 * self.width * 2 / 3)

    @property
    def num_control_tokens(self) -> int:
        if self.conditioning == "adaln":
            return 0
        return self.num_time_tokens + self.num_cfg_tokens + self.num_mode_tokens


# Named sizes (paper Table 6); `d`, `vocab_size`, `max_length` come from the data.
SIZES = {
    "ELF-B": dict(depth=12, width=768, heads=12),
    "ELF-M": dict(depth=24, width=1056, heads=16),
    "ELF-L": dict(depth=32, width=1280, heads=16),
}


def model_config(size: str, extra_sizes: dict | None = None, **fields) -> ModelConfig:
    """A ModelConfig from a named size plus the data-dependent fields."""
    sizes = {**SIZES, **(extra_sizes or {})}
    if size not in sizes:
        raise KeyError(f"unknown model size '{size}'; known: {', '.join(sizes)}")
    return replace(ModelConfig(), **{**sizes[size], **fields})


def run_model_config(model_s, extra_sizes: dict | None = None, **data_fields) -> ModelConfig:
    """The ModelConfig of a run's ``ModelSettings`` (elf/config.py) plus the data-dependent fields
    (``d``, ``vocab_size``, ``max_length``): the one translation from settings to network shape."""
    n = model_s.control_tokens
    return model_config(model_s.size, extra_sizes, bottleneck=model_s.bottleneck,
                        conditioning=model_s.conditioning, decode_head=model_s.decode_head,
                        num_time_tokens=n, num_cfg_tokens=n, num_mode_tokens=n, **data_fields)


# --------------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) · weight over the last dim, computed in fp32 and returned in x's dtype."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x * weight.float()).to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def sinusoidal(s: torch.Tensor, dim: int, max_period: float) -> torch.Tensor:
    """[cos(s·f_j), sin(s·f_j)], f_j = max_period^(−j/(dim/2)); raw s (t in [0,1], w as given)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32,
                                                           device=s.device) / half)
    angles = s.float()[:, None] * freqs[None]                              # (B, half)
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class ScalarEmbedder(nn.Module):
    """MLP(sinusoidal(s)): linear → SiLU → linear (names follow the released checkpoints)."""

    def __init__(self, width: int, freqs: int, max_period: float):
        super().__init__()
        self.freqs, self.max_period = freqs, max_period
        self.mlp_0 = nn.Linear(freqs, width)
        self.mlp_2 = nn.Linear(width, width)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        emb = sinusoidal(s, self.freqs, self.max_period).to(self.mlp_0.weight.dtype)
        return self.mlp_2(F.silu(self.mlp_0(emb)))                        # (B, W)


class Rope(NamedTuple):
    """RoPE tables of a sequence, (n_skip + length, head_dim/2) each: cos and sin of angle
    i·θ^(−2j/head_dim) for text position i and channel pair j, and ``cis`` = cos + i·sin; the first
    n_skip rows (control tokens, not rotated) are angle 0."""
    cos: torch.Tensor
    sin: torch.Tensor
    cis: torch.Tensor | None


def rope_tables(length: int, head_dim: int, theta: float, device, n_skip: int = 0,
                with_cis: bool = True) -> Rope:
    """The ``Rope`` of ``n_skip`` control tokens followed by ``length`` text positions (spec §3:
    RoPE on text positions only); ``with_cis=False`` leaves out the complex table."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inv_freq[None]
    cos = torch.cat([torch.ones(n_skip, head_dim // 2, device=device), torch.cos(angles)])
    sin = torch.cat([torch.zeros(n_skip, head_dim // 2, device=device), torch.sin(angles)])
    return Rope(cos, sin, torch.complex(cos, sin) if with_cis else None)


class RopeCache:
    """``rope_tables`` built once per (length, device): they depend on nothing else. Under
    torch.compile they are built inside the graph instead (constants to the compiler; a cache
    filled while tracing would be a side effect, and ``cis`` a complex op inductor cannot lower).
    On XLA they are cached without ``cis`` (``apply_rope`` uses the real formula there)."""

    def __init__(self, head_dim: int, theta: float, n_skip: int):
        self.head_dim, self.theta, self.n_skip = head_dim, theta, n_skip
        self.tables: dict[tuple, Rope] = {}

    def __call__(self, length: int, device) -> Rope:
        if torch.compiler.is_compiling():
            return rope_tables(length, self.head_dim, self.theta, device, self.n_skip, False)
        key = (length, torch.device(device))
        if key not in self.tables:
            self.tables[key] = self._build(length, key[1])
        return self.tables[key]

    def _build(self, length: int, device: torch.device) -> Rope:
        if device.type != "xla":
            return rope_tables(length, self.head_dim, self.theta, device, self.n_skip)
        # Built on the host and moved: device data from the start. Built on the device, they would
        # be computed inside the first forward's graph, which then differs from every later one's
        # (one extra compilation per process: the first rollout's first step).
        host = rope_tables(length, self.head_dim, self.theta, "cpu", self.n_skip, False)
        return Rope(host.cos.to(device), host.sin.to(device), None)


def apply_rope(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """Rotate the interleaved channel pairs (e, o) = (2j, 2j+1) of x (..., N, head_dim) by the
    angles of ``rope``: (e·cos − o·sin, e·sin + o·cos), in fp32, returned in x's dtype.

    Eager: one complex product (e + i·o)·cis, which on CPU forms the same rounded products and sums
    as the real formula (bit-identical, forward and backward) in one pass instead of eight; under
    torch.compile and on XLA the real formula, which the compiler fuses (inductor does not lower
    complex ops)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    if rope.cis is None:
        e, o = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack([e * rope.cos - o * rope.sin, e * rope.sin + o * rope.cos], dim=-1)
    else:
        rotated = torch.view_as_real(torch.view_as_complex(pairs) * rope.cis)
    return rotated.flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        self.proj = nn.Linear(cfg.width, cfg.width)

    def forward(self, h: torch.Tensor, rope: Rope):
        B, N, W = h.shape
        qkv = self.qkv(h).view(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        qk, v = qkv.split([2, 1])  # (split: its backward is one cat, not zero-filled slices)
        # q and k normed and rotated as one (2, B, H, N, hd) tensor, each with its own gain.
        gains = torch.stack([self.q_norm.weight, self.k_norm.weight])[:, None, None, None]
        qk = apply_rope(rms_norm(qk, gains, self.q_norm.eps), rope)
        out = F.scaled_dot_product_attention(qk[0], qk[1], v.squeeze(0))   # no mask: spec §3
        return self.proj(out.transpose(1, 2).reshape(B, N, W))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w12 = nn.Linear(cfg.width, 2 * cfg.mlp_hidden)
        self.w3 = nn.Linear(cfg.mlp_hidden, cfg.width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a, b = self.w12(h).chunk(2, dim=-1)
        return self.w3(F.silu(a) * b)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = RMSNorm(cfg.width, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = RMSNorm(cfg.width, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)
        if cfg.conditioning == "adaln":
            # adaLN-Zero (DiT): shift/scale/gate for attention and MLP from the condition vector.
            self.adaLN_modulation = nn.Linear(cfg.width, 6 * cfg.width)

    def forward(self, h, rope, cond=None):
        """``rope``: the ``Rope`` of h's positions (control tokens included)."""
        if cond is None:
            h = h + self.attn(self.norm1(h), rope)
            return h + self.mlp(self.norm2(h))
        shift1, scale1, gate1, shift2, scale2, gate2 = \
            self.adaLN_modulation(F.silu(cond))[:, None].chunk(6, dim=-1)
        h = h + gate1 * self.attn(self.norm1(h) * (1 + scale1) + shift1, rope)
        return h + gate2 * self.mlp(self.norm2(h) * (1 + scale2) + shift2)


class TextProj(nn.Module):
    """d → bottleneck (no bias) → width."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.proj1 = nn.Linear(cfg.d, cfg.bottleneck, bias=False)
        self.proj2 = nn.Linear(cfg.bottleneck, cfg.width)

    def forward(self, x):
        return self.proj2(self.proj1(x))


class FinalLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm_final = RMSNorm(cfg.width, cfg.norm_eps)
        self.linear = nn.Linear(cfg.width, cfg.d)
        if cfg.conditioning == "adaln":
            self.adaLN_modulation = nn.Linear(cfg.width, 2 * cfg.width)

    def forward(self, h, cond=None):
        h = self.norm_final(h)
        if cond is not None:
            shift, scale = self.adaLN_modulation(F.silu(cond))[:, None].chunk(2, dim=-1)
            h = h * (1 + scale) + shift
        return self.linear(h)


# --------------------------------------------------------------------------------------------------
# The network
# --------------------------------------------------------------------------------------------------

class ELF(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        W, d = cfg.width, cfg.d
        self.self_cond_proj = nn.Linear(2 * d, d)
        self.text_proj = TextProj(cfg)
        self.t_embedder = ScalarEmbedder(W, cfg.time_freqs, cfg.max_period)
        self.self_cond_cfg_embedder = ScalarEmbedder(W, cfg.time_freqs, cfg.max_period)
        if cfg.conditioning == "adaln":
            self.mode_embedding = nn.Parameter(torch.zeros(1, W))
        else:
            self.t_emb_tokens = nn.Parameter(torch.zeros(1, cfg.num_time_tokens, W))
            self.self_cond_cfg_tokens = nn.Parameter(torch.zeros(1, cfg.num_cfg_tokens, W))
            self.mode_tokens = nn.Parameter(torch.zeros(1, cfg.num_mode_tokens, W))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.final_layer = FinalLayer(cfg)
        self.rope = RopeCache(cfg.head_dim, cfg.rope_theta, cfg.num_control_tokens)
        if cfg.decode_head:
            # Stored (in, out) as in the released checkpoints.
            self.proj_kernel = nn.Parameter(torch.zeros(W, d))
            self.proj_bias = nn.Parameter(torch.zeros(d))
            self.unembed_kernel = nn.Parameter(torch.zeros(d, cfg.vocab_size))
            self.unembed_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.initialize_weights()

    def initialize_weights(self) -> None:
        # Xavier-uniform linears with zero biases (spec §3).
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        # Learned tokens and the time / SC-CFG MLPs: N(0, 0.02).
        for name, param in self.named_parameters():
            if name in ("t_emb_tokens", "self_cond_cfg_tokens", "mode_tokens", "mode_embedding"):
                nn.init.normal_(param, std=0.02)
        for emb in (self.t_embedder, self.self_cond_cfg_embedder):
            nn.init.normal_(emb.mlp_0.weight, std=0.02)
            nn.init.normal_(emb.mlp_2.weight, std=0.02)
        # Decode head: xavier for the two bare kernels.
        if self.cfg.decode_head:
            nn.init.xavier_uniform_(self.proj_kernel)
            nn.init.xavier_uniform_(self.unembed_kernel)
        # Zero-initialised denoise head (and adaLN-Zero modulations).
        nn.init.zeros_(self.final_layer.linear.weight)
        nn.init.zeros_(self.final_layer.linear.bias)
        for module in self.modules():
            if hasattr(module, "adaLN_modulation"):
                nn.init.zeros_(module.adaLN_modulation.weight)
                nn.init.zeros_(module.adaLN_modulation.bias)

    def forward(self, x_in: torch.Tensor, t: torch.Tensor, w: torch.Tensor,
                mode: torch.Tensor | None = None, decode_rows: torch.Tensor | None = None):
        """x_in (B, L, 2d) = [z ; x_sc]; t, w (B,); mode (B,) gate in {0, 1} (None = all off).
        Returns x̂ (B, L, d) and the text hidden states h (B, L, W) for ``decode``; with
        ``decode_rows`` also those rows' logits (inside forward, so DDP sees the decode head)."""
        B, L, _ = x_in.shape
        cfg = self.cfg
        with full_precision(x_in):  # input side in fp32, autocast off (elf/precision.py)
            h, cond = self._embed_inputs(x_in, t, w, mode)
        n_ctrl = cfg.num_control_tokens
        rope = self.rope(L, h.device)
        for block in self.blocks:  # under the caller's autocast, if any
            h = block(h, rope, cond)
        h = h.split([n_ctrl, L], dim=1)[1]     # (B, L, W); split: backward is a cat, no zero fill
        with full_precision(h):
            x_hat = self.final_layer(h, cond)
        if decode_rows is None:
            return x_hat, h
        return x_hat, h, self.decode(h[decode_rows])

    def _embed_inputs(self, x_in, t, w, mode):
        """The residual stream entering block 0 (control tokens prepended) and, for adaLN, the
        condition vector."""
        B = x_in.shape[0]
        h = self.text_proj(self.self_cond_proj(x_in))                        # (B, L, W)
        gate = torch.zeros(B, device=h.device, dtype=h.dtype) if mode is None else mode.to(h.dtype)
        t_emb = self.t_embedder(t)                                           # (B, W)
        w_emb = self.self_cond_cfg_embedder(w)                               # (B, W)
        if self.cfg.conditioning == "adaln":
            return h, t_emb + w_emb + gate[:, None] * self.mode_embedding
        ctrl = torch.cat([
            self.t_emb_tokens + t_emb[:, None],
            self.self_cond_cfg_tokens + w_emb[:, None],
            self.mode_tokens * gate[:, None, None],
        ], dim=1).to(h.dtype)                                                # (B, 12, W)
        return torch.cat([ctrl, h], dim=1), None                             # (B, 12 + L, W)

    def decode(self, h: torch.Tensor) -> torch.Tensor:
        """Token logits from text hidden states (before the final norm), (..., L, V); fp32 with
        autocast off, like the denoise head."""
        with full_precision(h):
            h = h.to(self.proj_kernel.dtype)
            hidden = F.gelu(h @ self.proj_kernel + self.proj_bias, approximate="tanh")
            return hidden @ self.unembed_kernel + self.unembed_bias

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def preset_num_parameters(size: str) -> int:
    """Parameters of the network at a named size and the ``ModelConfig`` defaults (the paper's data
    dims: T5-small d=512, vocabulary 32128, L=1024, bottleneck 128, in-context), counted on the meta
    device (no memory, no initialisation)."""
    with torch.device("meta"):
        return ELF(model_config(size)).num_parameters()
