"""The flow path and its parameterisations (spec §1): t = 0 is noise, t = 1 is data.

z_t = t·x + (1 − t)·σ_n·ε ;  v = (x − z_t) / max(1 − t, t_eps).
The network's raw output is read as x̂, v̂ or ε̂ (the prediction-target ablation, Fig. 11); every
other piece of the code works with x̂ and derives v̂ from it.
"""

from __future__ import annotations

import torch


def logit_normal(normal: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """sigmoid(mean + std·n) for standard-normal draws n."""
    return torch.sigmoid(mean + std * normal)


def sc_cfg_scale(u: torch.Tensor, w_min: float, w_max: float) -> torch.Tensor:
    """Training SC-CFG scale, log-uniform in 1 + w: w = a·(b/a)^u − 1 with a = 1 + w_min, b = 1 + w_max
    (spec §4), so w ∈ [w_min, w_max] and denser at small values."""
    a, b = 1.0 + w_min, 1.0 + w_max
    return a * (b / a) ** u - 1.0


def _bcast(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape + (1,) * (like.dim() - t.dim()))


def interpolate(x: torch.Tensor, eps: torch.Tensor, t: torch.Tensor, noise_scale: float) -> torch.Tensor:
    """z_t = t·x + (1 − t)·σ_n·ε, with ε a unit normal."""
    t = _bcast(t, x)
    return t * x + (1 - t) * noise_scale * eps


def velocity(x_hat: torch.Tensor, z: torch.Tensor, t: torch.Tensor, t_eps: float) -> torch.Tensor:
    """v = (x̂ − z) / max(1 − t, t_eps)."""
    return (x_hat - z) / _bcast((1 - t).clamp_min(t_eps), z)


def x_from_output(out: torch.Tensor, z: torch.Tensor, t: torch.Tensor, prediction: str,
                  t_eps: float, noise_scale: float) -> torch.Tensor:
    """x̂ from the network's raw output under the x / v / ε parameterisation."""
    if prediction == "x":
        return out
    if prediction == "v":  # v̂ = (x̂ − z)/max(1−t, t_eps)  ⇒  x̂ = z + max(1−t, t_eps)·v̂
        return z + _bcast((1 - t).clamp_min(t_eps), z) * out
    if prediction == "eps":  # z = t·x + (1−t)·σ·ε  ⇒  x̂ = (z − (1−t)·σ·ε̂)/max(t, t_eps)
        t_b = _bcast(t, z)
        return (z - (1 - t_b) * noise_scale * out) / t_b.clamp_min(t_eps)
    raise ValueError(f"unknown prediction target {prediction!r}")
