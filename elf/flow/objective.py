"""One ELF training step's loss (spec §4), with every random draw made in ``draw_step``.

A test (or another implementation) can pass its own ``StepDraws`` and replay a step exactly.
Batch tensors: ``x`` (B, L, d) normalised clean embeddings, ``x_nosource`` (conditional: the target
encoded without seeing the source, for label drop), ``input_ids`` (B, L), ``attention_mask`` (B, L),
``cond_seq_mask`` (B, L) = 1 on source positions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from elf.config import ObjectiveSettings
from elf.flow.paths import interpolate, logit_normal, sc_cfg_scale, velocity, x_from_output


@dataclass
class StepDraws:
    """Every random quantity of one step; eps tensors are unit normals."""
    decode_row: torch.Tensor      # (B,) float 0/1: decode (CE) branch
    t: torch.Tensor               # (B,) logit-normal time
    eps: torch.Tensor             # (B, L, d) denoise noise
    lam: torch.Tensor             # (B, L) per-token decode mixing weight
    eps_decode: torch.Tensor      # (B, L, d) decode noise
    use_self_cond: torch.Tensor   # (B,) float 0/1
    w: torch.Tensor               # (B,) SC-CFG scale
    label_drop: torch.Tensor      # (B,) bool

    def to(self, device) -> "StepDraws":
        return StepDraws(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


def draw_step(shape: tuple[int, int, int], s: ObjectiveSettings, generator: torch.Generator,
              device="cpu") -> StepDraws:
    """Draw one step's randomness from ``generator`` (on CPU, so results do not depend on device)."""
    B, L, d = shape
    g = dict(generator=generator)
    decode_row = (torch.rand(B, **g) < s.decode_prob).float()
    t = logit_normal(torch.randn(B, **g), s.t_mean, s.t_std)
    eps = torch.randn(B, L, d, **g)
    lam = logit_normal(torch.randn(B, L, **g), s.decode_lambda_mean, s.decode_lambda_std)
    eps_decode = torch.randn(B, L, d, **g)
    use_self_cond = (torch.rand(B, **g) < s.self_cond_prob).float()
    w = sc_cfg_scale(torch.rand(B, **g), s.sc_cfg_min, s.sc_cfg_max)
    label_drop = torch.rand(B, **g) < s.label_drop_prob
    return StepDraws(decode_row, t, eps, lam, eps_decode, use_self_cond, w, label_drop).to(device)


@dataclass
class StepOutput:
    loss: torch.Tensor
    ce_loss: torch.Tensor
    l2_loss: torch.Tensor
    sums: torch.Tensor  # [Σ CE·mask, Σ L2·mask, Σ mask on decode rows, Σ mask on denoise rows]
    parts: dict  # intermediates (detached), for tests and logging


def clean_embeddings(batch: dict, label_drop: torch.Tensor) -> torch.Tensor:
    """x0: label-dropped rows use the target encoded without the source, with source positions
    zeroed (spec §2 'Label drop')."""
    x = batch["x"]
    if "x_nosource" not in batch:  # (no ``label_drop.any()`` shortcut: a host sync per step)
        return x
    src = batch["cond_seq_mask"][..., None] > 0
    dropped = torch.where(src, torch.zeros_like(x), batch["x_nosource"])
    return torch.where(label_drop[:, None, None], dropped, x)


def loss_mask(batch: dict, loss_covers_padding: bool) -> torch.Tensor:
    """Valid target positions: (attention_mask, or 1 where EOS padding is learned) · (1 − source)."""
    valid = torch.ones_like(batch["attention_mask"], dtype=torch.float32) if loss_covers_padding \
        else batch["attention_mask"].float()
    return valid * (1 - batch["cond_seq_mask"].float())


def decode_cross_entropy(logits: torch.Tensor, input_ids: torch.Tensor, decode_rows: torch.Tensor,
                         like: torch.Tensor) -> torch.Tensor:
    """Per-token fp32 cross-entropy (B, L) on the decode rows (zeros elsewhere)."""
    ce_per_token = torch.zeros_like(like)
    if decode_rows.numel():
        ce_rows = F.cross_entropy(logits.float().transpose(1, 2),
                                  input_ids[decode_rows].long(), reduction="none")
        ce_per_token = ce_per_token.index_put((decode_rows,), ce_rows)
    return ce_per_token


def static_decode_rows(decode_row: torch.Tensor, decode_prob: float) -> torch.Tensor:
    """The rows the decode head runs on when no row is selected by value: all (none when the run
    has no decode branch)."""
    return torch.arange(decode_row.shape[0] if decode_prob > 0 else 0, device=decode_row.device)


def keep_decode_rows(ce_per_token: torch.Tensor, decode_row: torch.Tensor) -> torch.Tensor:
    """Cross-entropy computed on every row, zero (and gradient-free) outside the decode rows."""
    return torch.where(decode_row[:, None] > 0, ce_per_token, torch.zeros_like(ce_per_token))


def combine_branches(ce_per_token, denoise_per_token, decode_row, mask, denominator=None):
    """Total = (Σ CE·mask on decode rows + Σ denoise·mask on the others) / Σ mask (spec §4 step 6);
    also each branch's own mean and the four sums (for logging across micro-batches / ranks)."""
    dec = decode_row[:, None]
    ce_sum = (ce_per_token * mask * dec).sum()
    denoise_sum = (denoise_per_token * mask * (1 - dec)).sum()
    denom = mask.sum().clamp_min(1) if denominator is None else denominator
    ce_count, denoise_count = (mask * dec).sum(), (mask * (1 - dec)).sum()
    sums = torch.stack([ce_sum, denoise_sum, ce_count, denoise_count]).detach()
    return ((ce_sum + denoise_sum) / denom, (ce_sum / ce_count.clamp_min(1)).detach(),
            (denoise_sum / denoise_count.clamp_min(1)).detach(), sums)


def first_pass(model, x_in: torch.Tensor, z: torch.Tensor, t: torch.Tensor, w: torch.Tensor,
               as_x, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Gradient-free x̂₀ (spec §4 step 1) on ``rows`` (None: every row), zeros on the others.
    Rows are independent through the network, so a row's x̂₀ does not depend on which others run."""
    with torch.no_grad():
        if rows is None:
            out, _ = model(x_in, t, w)
            return as_x(out, z, t)
        x_hat = torch.zeros_like(z)
        if rows.numel():
            out, _ = model(x_in[rows], t[rows], w[rows])
            x_hat[rows] = as_x(out, z[rows], t[rows])
        return x_hat


def training_step(model, batch: dict, draws: StepDraws, s: ObjectiveSettings, *,
                  prediction: str = "x", loss_covers_padding: bool = False,
                  denominator: torch.Tensor | None = None,
                  first_pass_all_rows: bool = True, static_shapes: bool = False) -> StepOutput:
    """The combined decode/denoise loss of spec §4 on one batch, given the step's draws.

    ``denominator`` overrides Σ mask: with gradient accumulation or DDP the loop passes the global
    batch's mask sum so that the summed micro-batch losses equal the one-batch loss exactly.
    ``first_pass_all_rows=False`` runs the first pass only on the self-conditioning denoise rows,
    the only ones whose x̂₀ is read (step 2 zeroes it elsewhere; step 4's guidance term is zero on
    the other denoise rows and decode rows carry no denoise loss): same loss and gradients, about
    60 % of that pass saved; ``parts["x_hat_first"]`` is then zero on the skipped rows.
    ``static_shapes=True`` (XLA) selects no rows by value: the first pass runs on every row and the
    decode head on every row with the cross-entropy kept on decode rows only (``torch.where``), so
    every step has one graph; same loss and gradients (``parts["decode_rows"]`` is then every row)."""
    src = batch["cond_seq_mask"][..., None] > 0                            # (B, L, 1)
    x0 = clean_embeddings(batch, draws.label_drop)
    t, w, dec = draws.t, draws.w, draws.decode_row
    dec3 = dec[:, None, None]

    z_t = torch.where(src, x0, interpolate(x0, draws.eps, t, s.noise_scale))
    z_dec = interpolate(x0, draws.eps_decode, draws.lam, s.decode_noise_scale)  # source not restored
    as_x = lambda out, z, tt: x_from_output(out, z, tt, prediction, s.t_eps, s.noise_scale)

    # 1. Gradient-free first pass with an empty self-conditioning half (source kept clean).
    sc_empty = torch.where(src, x0, torch.zeros_like(x0))
    rows = None if first_pass_all_rows or static_shapes else \
        (draws.use_self_cond * (1 - dec) > 0).nonzero().squeeze(-1)
    x_hat_first = first_pass(model, torch.cat([z_t, sc_empty], -1), z_t, t, w, as_x, rows)

    # 2. Self-conditioning half: x̂₀ on self-cond rows, zeros otherwise, all zeros on decode rows.
    sc_half = torch.where(src, x0, x_hat_first * draws.use_self_cond[:, None, None]) * (1 - dec3)

    # 3. Main forward on the mixed batch (decode rows: z̃, t = 1, mode tokens on).
    z_main = dec3 * z_dec + (1 - dec3) * z_t
    t_main = torch.where(dec > 0, torch.ones_like(t), t)
    decode_rows = static_decode_rows(dec, s.decode_prob) if static_shapes else dec.nonzero().squeeze(-1)
    if s.decode_prob > 0:
        out_main, _, logits = model(torch.cat([z_main, sc_half], -1), t_main, w, dec,
                                    decode_rows=decode_rows)
    else:  # denoiser only (separate decoder, Fig. 5b): the model may have no decode head
        out_main, _ = model(torch.cat([z_main, sc_half], -1), t_main, w, dec)
        logits = z_main.new_zeros(0, z_main.shape[1], 0)
    x_hat = as_x(out_main, z_main, t_main)

    # 4. Denoise loss against the SC-CFG-guided velocity target.
    v_hat = velocity(x_hat, z_t, t, s.t_eps)
    v_target = velocity(x0, z_t, t, s.t_eps)
    v_u = velocity(x_hat_first, z_t, t, s.t_eps)
    if s.sc_cfg_target == "extra_forward":  # the released code's third forward
        with torch.no_grad():
            sc_full = torch.where(src, x0, x_hat_first)
            out_c, _ = model(torch.cat([z_t, sc_full], -1), t, w)
            v_c = velocity(as_x(out_c, z_t, t), z_t, t, s.t_eps)
    else:
        # With dropout 0 the third forward sees exactly the main input on every row where the
        # guidance term is non-zero (self-cond denoise rows), so v̂_c = v̂ there (spec §4 step 4).
        v_c = v_hat.detach()
    guidance = (draws.use_self_cond * (1 - 1 / w))[:, None, None]
    v_star = (v_target + guidance * (v_c - v_u)).detach()
    l2_per_token = (v_hat - v_star).pow(2).mean(-1)                          # (B, L)

    # 5.–6. Decode cross-entropy on decode rows, one denominator for both branches.
    ce_per_token = decode_cross_entropy(logits, batch["input_ids"], decode_rows, like=l2_per_token)
    if static_shapes:
        ce_per_token = keep_decode_rows(ce_per_token, dec)
    mask = loss_mask(batch, loss_covers_padding)
    loss, ce_loss, l2_loss, sums = combine_branches(ce_per_token, l2_per_token, dec, mask, denominator)
    parts = dict(z_t=z_t, z_decode=z_dec, t_main=t_main, x_hat_first=x_hat_first, sc_half=sc_half,
                 x_hat=x_hat.detach(), v_target=v_target, v_star=v_star,
                 l2_per_token=l2_per_token.detach(), ce_per_token=ce_per_token.detach(),
                 loss_mask=mask, decode_rows=decode_rows,
                 logits_decode_rows=logits.detach())
    return StepOutput(loss, ce_loss, l2_loss, sums, parts)
