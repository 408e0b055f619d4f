"""Held-out denoising error of a network per time, beside the per-channel linear denoiser (spec §1).

Under ``z_t = t·x + (1 − t)·σ_n·ε`` the best *linear* estimate of channel c of x from channel c of
z_t alone is the Wiener filter

    x̂_c = μ_c + k_c·(z_c − t·μ_c),   k_c = t·s²_c / (t²·s²_c + (1 − t)²·σ_n²),

with μ_c, s²_c the channel's mean and variance on the training data. It knows the marginal statistics
and nothing else: a denoiser that uses the other positions (context) and the other channels (the
token's embedding) beats it; one whose error ratio stays near 1 has learned no more than that.
Both are measured on the same noise draws, without self-conditioning (the first sampling step).
"""

from __future__ import annotations

import torch

from elf.flow.paths import interpolate, x_from_output


def channel_moments(x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and variance (d,) of ``x`` (N, L, d) over the positions where ``valid``."""
    rows = x[valid.bool()].double()
    return rows.mean(0).float(), rows.var(0, unbiased=False).float()


def linear_denoise(z: torch.Tensor, t: float, noise_scale: float, mean: torch.Tensor,
                   var: torch.Tensor) -> torch.Tensor:
    """The per-channel Wiener estimate of x from z_t (module docstring)."""
    gain = t * var / (t * t * var + (1 - t) ** 2 * noise_scale ** 2)
    return mean + gain * (z - t * mean)


@torch.no_grad()
def denoise_errors(model, x: torch.Tensor, valid: torch.Tensor, times: tuple[float, ...],
                   noise_scale: float, generator: torch.Generator, *, mean: torch.Tensor,
                   var: torch.Tensor, prediction: str = "x", t_eps: float = 0.05,
                   sc_cfg: float = 1.0, batch_size: int = 64) -> list[dict]:
    """For each t: mean squared error per channel of the network's x̂ and of the linear denoiser on
    the valid positions of ``x`` (N, L, d), and their ratio. The noise comes from ``generator``."""
    device = next(model.parameters()).device
    mask = valid.bool()
    results = []
    for t in times:
        err_net = err_lin = 0.0
        count = int(mask.sum())
        for lo in range(0, len(x), batch_size):
            xb, mb = x[lo:lo + batch_size], mask[lo:lo + batch_size]
            eps = torch.randn(xb.shape, generator=generator)
            tb = torch.full((len(xb),), float(t))
            z = interpolate(xb, eps, tb, noise_scale)
            out, _ = model(torch.cat([z, torch.zeros_like(z)], -1).to(device), tb.to(device),
                           torch.full((len(xb),), sc_cfg, device=device))
            x_hat = x_from_output(out.float().cpu(), z, tb, prediction, t_eps, noise_scale)
            x_lin = linear_denoise(z, t, noise_scale, mean, var)
            err_net += float((x_hat - xb).pow(2).mean(-1)[mb].sum())
            err_lin += float((x_lin - xb).pow(2).mean(-1)[mb].sum())
        results.append(dict(t=float(t), mse=err_net / count, mse_linear=err_lin / count,
                            ratio=err_net / max(err_lin, 1e-12)))
    return results
