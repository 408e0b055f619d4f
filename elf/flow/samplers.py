"""Sampling and decoding (spec §5): time grids, the Euler ODE and SDE-inspired samplers, SC-CFG and
input-condition CFG, decode at t = 1 and post-processing. No I/O.

Every random draw (grid, initial noise, SDE re-injection noise) comes from the caller's generator.
The caller chooses the precision: ``elf sample`` runs a rollout under ``elf.precision.network_autocast``
(the network itself keeps its heads in fp32, so states and x̂ stay fp32).
The last step is always an ODE step. Conditional generation keeps the clean source embeddings
pinned at the source positions throughout. On XLA every step is one graph (``elf.device.sync`` after
it) fed its times as device data, so a rollout compiles each kind of step once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from elf.config import SamplerSettings
from elf.device import is_xla, sync
from elf.flow.paths import logit_normal, velocity, x_from_output
from elf.precision import full_precision


def time_grid(s: SamplerSettings, generator: torch.Generator | None = None) -> torch.Tensor:
    """(N+1,) times from 0 to 1: uniform, or N−1 sorted logit-normal draws with 0 and 1 added."""
    if s.grid == "uniform":
        return torch.linspace(0.0, 1.0, s.steps + 1)
    inner = logit_normal(torch.randn(s.steps - 1, generator=generator), s.grid_mean, s.grid_std)
    return torch.cat([torch.zeros(1), inner.sort().values, torch.ones(1)])


@dataclass
class Source:
    """Conditional generation: which positions hold the source, and its clean embeddings there."""
    mask: torch.Tensor        # (B, L) bool
    embeddings: torch.Tensor  # (B, L, d); only source positions are read

    def pin(self, x: torch.Tensor, value: torch.Tensor | None = None) -> torch.Tensor:
        """x with the source positions set to the clean source (or to ``value``)."""
        fill = self.embeddings if value is None else value
        return torch.where(self.mask[..., None], fill, x)


class Denoiser:
    """x̂ and v̂ at one state, with SC-CFG as a model input and optional input-condition CFG."""

    def __init__(self, model, s: SamplerSettings, prediction: str = "x",
                 source: Optional[Source] = None):
        self.model, self.s, self.prediction, self.source = model, s, prediction, source
        self.calls = 0  # network calls, for accounting
        self._w: torch.Tensor | None = None  # the (B,) SC-CFG scale, made once

    def _batch(self, t, B: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(t, w) as (B,) tensors; ``t`` a float or a 0-d tensor on the device (``rollout``)."""
        if self._w is None or self._w.shape[0] != B or self._w.device != torch.device(device):
            self._w = torch.full((B,), self.s.sc_cfg, device=device)
        if isinstance(t, torch.Tensor):
            return t.expand(B), self._w
        return torch.full((B,), float(t), device=device), self._w

    def _net(self, z, x_prev, t):
        t_b, w_b = self._batch(t, z.shape[0], z.device)
        self.calls += 1
        out, _ = self.model(torch.cat([z, x_prev], -1), t_b, w_b)
        x_hat = x_from_output(out, z, t_b, self.prediction, self.s.t_eps, self.s.noise_scale)
        return x_hat, velocity(x_hat, z, t_b, self.s.t_eps), out

    def __call__(self, z, x_prev, t):
        """Returns (x̂, v̂) with the source restored in x̂ and zeroed in v̂."""
        src = self.source
        x_c, v_c, _ = self._net(z, x_prev, t)
        if src is None:
            return x_c, v_c
        zero = torch.zeros_like(z)
        x_c, v_c = src.pin(x_c), src.pin(v_c, zero)
        if self.s.input_cfg == 1.0:
            return x_c, v_c
        # Unconditional pass: the source removed from both halves of the input.
        z_u, xp_u = src.pin(z, zero), src.pin(x_prev, zero)
        x_u, v_u, _ = self._net(z_u, xp_u, t)
        x_u, v_u = src.pin(x_u, zero), src.pin(v_u, zero)
        scale = self.s.input_cfg
        x_hat = src.pin(x_u + scale * (x_c - x_u))
        v_hat = src.pin(v_u + scale * (v_c - v_u), zero)
        return x_hat, v_hat


StepRecorder = Callable[[int, float, torch.Tensor, torch.Tensor], None]


def sde_alpha(s: SamplerSettings, t: float, t_next: float) -> float:
    """The SDE step's back-off factor α = clip(1 − γ·(t_next − t), 0, 1) (t_b = α·t)."""
    return min(max(1.0 - s.gamma * (t_next - t), 0.0), 1.0)


def rollout(model, s: SamplerSettings, z_init: torch.Tensor, generator: torch.Generator | None = None,
            *, grid: torch.Tensor | None = None, source: Optional[Source] = None,
            prediction: str = "x", record: StepRecorder | None = None) -> tuple[torch.Tensor, Denoiser]:
    """Integrate from ``z_init`` (already scaled noise) at t = 0 to t = 1. Returns the final state and
    the denoiser (whose ``calls`` counts network evaluations). ``record(k, t_next, z, x_hat)`` is
    called after every step."""
    grid = time_grid(s, generator) if grid is None else grid
    denoise = Denoiser(model, s, prediction, source)
    times = grid.tolist()
    n = len(times) - 1
    # Per step: α of an SDE step (the last step is always ODE), None for an ODE step; the network
    # times (t, or t_b = α·t), made on the device once, rounded to fp32 as a per-step tensor would be.
    alphas = [sde_alpha(s, times[k], times[k + 1]) if s.method == "sde" and k < n - 1 else None
              for k in range(n)]
    net_t = _per_step(torch.tensor([t if a is None else a * t for t, a in zip(times, alphas)],
                                   dtype=torch.float32), z_init.device)
    grid_t = _per_step(grid.to(torch.float32), z_init.device)
    zeros = torch.zeros_like(z_init)
    z = z_init if source is None else source.pin(z_init)
    x_prev = zeros if source is None else source.pin(zeros)
    for k in range(n):
        t, t_next = times[k], times[k + 1]
        if alphas[k] is None:
            x_hat, v_hat = denoise(z, x_prev, net_t[k])
            z = z + (t_next - t) * v_hat
        else:
            z, x_hat = _sde_step(denoise, z, x_prev, (t, t_next, alphas[k]), (grid_t[k], net_t[k]),
                                 s, generator, source)
        x_prev = x_hat
        sync(z)
        if record is not None:
            record(k, t_next, z, x_hat)
    return z, denoise


def _per_step(values: torch.Tensor, device):
    """``values[k]`` on ``device`` for step k: one copy, indexed; on XLA a transfer per value
    (indexing a device tensor by k would make each step's graph a different one)."""
    if is_xla(device):
        return [v.to(device) for v in values.unbind()]
    return values.to(device)


def _sde_step(denoise, z, x_prev, times, device_times, s: SamplerSettings, generator, source):
    """Back off to t_b = α·t with fresh noise, predict there, then Euler-step to t_next from the
    backed-off state (released code) or from the original state (paper App. C.2). ``times`` =
    (t, t_next, α) as floats, ``device_times`` = (t, t_b) as 0-d tensors on z's device."""
    t, t_next, alpha = times
    t_dev, t_b_dev = device_times
    t_b = alpha * t
    noise = torch.randn(z.shape, generator=generator).to(z.device)
    z_b = alpha * z + (1 - alpha) * s.noise_scale * noise
    if source is not None:
        z_b = source.pin(z_b)
    x_hat, v_b = denoise(z_b, x_prev, t_b_dev)
    if s.sde_variant == "backed_off":
        z_next = z_b + (t_next - t_b) * v_b
    else:
        v = velocity(x_hat, z, t_dev, s.t_eps)
        if source is not None:
            v = source.pin(v, torch.zeros_like(v))
        z_next = z + (t_next - t) * v
    return z_next, x_hat


@torch.no_grad()
def decode_logits(model, z: torch.Tensor, sc_cfg: float) -> torch.Tensor:
    """One decode-mode forward on [z ; 0] at t = 1 (self-cond half all zeros, source included)."""
    B = z.shape[0]
    ones = torch.ones(B, device=z.device)
    _, h = model(torch.cat([z, torch.zeros_like(z)], -1), ones, torch.full((B,), sc_cfg,
                                                                          device=z.device), ones)
    return model.decode(h)


@torch.no_grad()
def decode_final(model, z: torch.Tensor, sc_cfg: float, decoder=None) -> torch.Tensor:
    """Token logits of the final state: the shared decode head (``decode_logits``), or, for a
    denoiser-only run (Fig. 5b), the separate decoder applied to ``z`` as clean embeddings (in fp32
    whatever the precision policy: it is trained in fp32)."""
    if decoder is None:
        return decode_logits(model, z, sc_cfg)
    with full_precision(z):
        return decoder(z.float())


def cut_at_eos(ids: torch.Tensor, eos_id: int, fill_id: int) -> torch.Tensor:
    """Every position from the first EOS on becomes ``fill_id``."""
    after = (ids == eos_id).int().cumsum(-1) > 0
    return torch.where(after, torch.full_like(ids, fill_id), ids)


def drop_source(ids: torch.Tensor, source_length: torch.Tensor, target_length: int,
                fill_id: int) -> torch.Tensor:
    """Shift each row left by its source length and keep ``target_length`` tokens."""
    B, L = ids.shape
    idx = source_length[:, None].to(ids.device) + torch.arange(target_length, device=ids.device)
    out = ids.gather(1, idx.clamp_max(L - 1))
    return torch.where(idx < L, out, torch.full_like(out, fill_id))


def postprocess(ids: torch.Tensor, eos_id: int, pad_id: int, *, source_length=None,
                target_length: int | None = None) -> torch.Tensor:
    """Unconditional: cut at the first EOS (filled with pad). Conditional: drop the source, keep
    ``target_length`` tokens, cut at the first EOS (filled with EOS)."""
    if source_length is None:
        return cut_at_eos(ids, eos_id, pad_id)
    return cut_at_eos(drop_source(ids, source_length, target_length, eos_id), eos_id, eos_id)
