"""One progressive-distillation step's loss (spec §7, ELF+PD), with every random draw made in
``draw_distill_step`` (as ``elf.flow.objective.draw_step`` does for training), so a test can inject its
own ``DistillDraws`` and replay a step exactly. No I/O.

Per example (batch tensors as in ``elf.flow.objective``):
- decode rows (p ``decode_prob``) keep the training cross-entropy unchanged (spec §4 steps 3 and 5);
- every other row is a distillation row. With span Δ = 1/N_student and K teacher sub-steps::

      t_s = sigmoid(N(μ, σ²))·(1 − Δ),  t_t = t_s + Δ,  z_s = t_s·x + (1 − t_s)·σ_n·ε
      x̂₀  = teacher([z_s ; 0], t_s, w)                               gradient-free
      sc   = x̂₀ on self-conditioning rows (p 0.5), zeros otherwise     the student's self-cond half
      teacher: τ_0 = t_s < τ_1 < … < τ_K = t_t, τ_1..τ_{K−1} sorted logit-normal points in the span,
               x̂_k = teacher([z_k ; sc_k], τ_k, w),
               z_{k+1} = z_k + (τ_{k+1} − τ_k)·(x̂_k − z_k)/max(1 − τ_k, t_eps),
               sc_0 = sc, sc_{k+1} = x̂_k                               chained self-conditioning
      x̃ = z_s + (1 − t_s)/(t_t − t_s)·(z_K − z_s)    (x̂_{K−1}, the last sub-step's, when t_t − t_s < 1e-3)
      loss per token = mean_d (x̂_student([z_s ; sc], t_s, w) − x̃)²  (no velocity weighting)

  x̃ is the x̂ with which one student Euler step from (z_s, t_s) lands where the teacher's K sub-steps
  land. While every τ_k ≤ 1 − t_eps it is a weighted average of the teacher's sub-step predictions: a
  teacher that predicts a fixed x gives x̃ = x for every span and K (tests/test_distill.py checks this,
  the general weights, and the clamped region).
- Total (spec §7, the authors' ``distill_train_step``): each example's masked mean over its tokens
  (CE on decode rows, MSE on distillation rows), then the plain mean over the batch's examples. Unlike
  training (one Σ mask denominator), an example with few loss tokens weighs as much as a full one.

Choices the spec leaves open (made here, documented so they can be changed deliberately):
- The teacher uses the row's sampled SC-CFG scale ``w`` (the student's) in every call, mode off.
- The teacher's first sub-step sees exactly the student's input (z_s, t_s, self-cond half, w): on
  self-conditioning rows x̂₀, otherwise zeros; so on rows without self-conditioning at t_s = 0 (round 5)
  the target is the teacher's own sampling trajectory from noise. Teacher calls per step: 1 + K.
- Sub-step points are drawn per example, logit-normal with the training time law (``t_mean``,
  ``t_std``; the sampler grid's defaults −1.5, 0.8), sorted, rescaled into the row's span.
- The target formula is spec §7's, (1 − t_s) unclamped; it inverts the student's clamped Euler step
  whenever Δ ≥ t_eps (every round of the curriculum: Δ ≥ 1/16), since 1 − t_s ≥ Δ.
- Teacher forwards run on the distillation rows only (decode rows never need them).
- Conditional data: source positions stay at the clean x in z_s, in the teacher's states and
  predictions, and in every self-conditioning half (as in training and sampling); label drop as in
  training.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from elf.config import DistillSettings, ObjectiveSettings
from elf.flow.objective import (StepOutput, clean_embeddings, decode_cross_entropy, keep_decode_rows,
                                loss_mask, static_decode_rows)
from elf.flow.paths import interpolate, logit_normal, sc_cfg_scale, velocity, x_from_output

SMALL_SPAN = 1e-3  # below this span the target is the teacher's last sub-step x̂ (spec §7)


@dataclass
class DistillDraws:
    """Every random quantity of one distillation step; eps tensors are unit normals."""
    decode_row: torch.Tensor      # (B,) float 0/1: decode (CE) branch
    times: torch.Tensor           # (B, K+1) teacher sub-step times t_s = τ_0 < … < τ_K = t_t
    eps: torch.Tensor             # (B, L, d) noise of z_s
    lam: torch.Tensor             # (B, L) per-token decode mixing weight
    eps_decode: torch.Tensor      # (B, L, d) decode noise
    use_self_cond: torch.Tensor   # (B,) float 0/1
    w: torch.Tensor               # (B,) SC-CFG scale
    label_drop: torch.Tensor      # (B,) bool

    @property
    def t_s(self) -> torch.Tensor:
        return self.times[:, 0]

    @property
    def t_t(self) -> torch.Tensor:
        return self.times[:, -1]

    @property
    def substeps(self) -> int:
        return self.times.shape[1] - 1

    def to(self, device) -> "DistillDraws":
        return DistillDraws(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


def substep_times(t_s: torch.Tensor, span: float, inner_unit: torch.Tensor) -> torch.Tensor:
    """(B, K+1) times: t_s, then t_s + span·(sorted points in (0, 1)), then t_s + span."""
    inner = t_s[:, None] + span * inner_unit.sort(dim=1).values
    return torch.cat([t_s[:, None], inner, (t_s + span)[:, None]], dim=1)


def draw_distill_step(shape: tuple[int, int, int], s: ObjectiveSettings, d: DistillSettings,
                      generator: torch.Generator, device="cpu") -> DistillDraws:
    """Draw one step's randomness from ``generator`` (on CPU, so results do not depend on device)."""
    B, L, dim = shape
    g = dict(generator=generator)
    span = 1.0 / d.student_steps
    decode_row = (torch.rand(B, **g) < s.decode_prob).float()
    t_s = logit_normal(torch.randn(B, **g), s.t_mean, s.t_std) * (1.0 - span)
    inner_unit = logit_normal(torch.randn(B, d.teacher_substeps - 1, **g), s.t_mean, s.t_std)
    eps = torch.randn(B, L, dim, **g)
    lam = logit_normal(torch.randn(B, L, **g), s.decode_lambda_mean, s.decode_lambda_std)
    eps_decode = torch.randn(B, L, dim, **g)
    use_self_cond = (torch.rand(B, **g) < s.self_cond_prob).float()
    w = sc_cfg_scale(torch.rand(B, **g), s.sc_cfg_min, s.sc_cfg_max)
    label_drop = torch.rand(B, **g) < s.label_drop_prob
    return DistillDraws(decode_row, substep_times(t_s, span, inner_unit), eps, lam, eps_decode,
                        use_self_cond, w, label_drop).to(device)


def _col(t: torch.Tensor) -> torch.Tensor:
    return t[:, None, None]


def network_x(model, z: torch.Tensor, self_cond: torch.Tensor, t: torch.Tensor, w: torch.Tensor,
              prediction: str, s: ObjectiveSettings) -> torch.Tensor:
    """x̂ of a denoise-mode forward on [z ; self_cond] at times t with SC-CFG scales w."""
    out = model(torch.cat([z, self_cond], -1), t, w)[0]
    return x_from_output(out, z, t, prediction, s.t_eps, s.noise_scale)


def teacher_trajectory(teacher, z_s: torch.Tensor, self_cond: torch.Tensor, times: torch.Tensor,
                       w: torch.Tensor, s: ObjectiveSettings, *, prediction: str = "x",
                       source: torch.Tensor | None = None, x_clean: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's K Euler sub-steps over ``times`` (B, K+1) from ``z_s`` with chained
    self-conditioning starting at ``self_cond``; velocities use max(1 − τ, t_eps) as in sampling.
    Returns (z at τ_K, the last sub-step's x̂). ``source`` (B, L, 1) bool pins those positions of
    every x̂ to ``x_clean``. Call without grad."""
    z, sc, x_hat = z_s, self_cond, None
    for k in range(times.shape[1] - 1):
        tau, tau_next = times[:, k], times[:, k + 1]
        x_hat = network_x(teacher, z, sc, tau, w, prediction, s)
        if source is not None:
            x_hat = torch.where(source, x_clean, x_hat)
        z = z + _col(tau_next - tau) * velocity(x_hat, z, tau, s.t_eps)
        sc = x_hat
    return z, x_hat


def distill_target(z_s: torch.Tensor, z_t: torch.Tensor, t_s: torch.Tensor, t_t: torch.Tensor,
                   x_direct: torch.Tensor) -> torch.Tensor:
    """x̃ = z_s + (1 − t_s)/(t_t − t_s)·(z_t − z_s); ``x_direct`` (the teacher's last sub-step x̂) on
    rows whose span is < 1e-3."""
    span = t_t - t_s
    x_tilde = z_s + _col((1 - t_s) / span.clamp_min(SMALL_SPAN)) * (z_t - z_s)
    return torch.where(_col(span < SMALL_SPAN), x_direct, x_tilde)


def per_example_loss(ce_per_token: torch.Tensor, mse_per_token: torch.Tensor,
                     decode_row: torch.Tensor, mask: torch.Tensor, batch_rows: int | None = None):
    """Each example's masked mean over its tokens (CE on decode rows, MSE on the others), then
    Σ over examples / ``batch_rows`` (the global batch's rows; default this batch's). Returns
    (loss, mean CE over decode rows, mean MSE over distillation rows, sums) with
    sums = [Σ example CE, Σ example MSE, decode rows, distillation rows] for logging."""
    tokens = mask.sum(1).clamp_min(1)
    ce_rows = (ce_per_token * mask).sum(1) / tokens
    mse_rows = (mse_per_token * mask).sum(1) / tokens
    ce_sum, mse_sum = (ce_rows * decode_row).sum(), (mse_rows * (1 - decode_row)).sum()
    n_decode, n_distill = decode_row.sum(), (1 - decode_row).sum()
    rows = decode_row.numel() if batch_rows is None else batch_rows
    sums = torch.stack([ce_sum, mse_sum, n_decode, n_distill]).detach()
    return ((ce_sum + mse_sum) / rows, (ce_sum / n_decode.clamp_min(1)).detach(),
            (mse_sum / n_distill.clamp_min(1)).detach(), sums)


def distill_step(student, teacher, batch: dict, draws: DistillDraws, s: ObjectiveSettings, *,
                 student_prediction: str = "x", teacher_prediction: str = "x",
                 loss_covers_padding: bool = False, batch_rows: int | None = None,
                 static_shapes: bool = False) -> StepOutput:
    """The ELF+PD loss of spec §7 on one batch, given the step's draws (see module docstring).

    ``batch_rows``: the global batch's number of examples when this batch is one micro-batch or
    rank's slice of it (the loop), so that the slices' summed losses equal the whole batch's.
    ``sums`` as ``per_example_loss``'s. ``static_shapes=True`` (XLA): no rows selected by value, the
    teacher runs on every row (its results kept on distillation rows by ``torch.where``) and the
    decode head as in ``training_step(static_shapes=True)``; the same loss and gradients."""
    src = batch["cond_seq_mask"][..., None] > 0                            # (B, L, 1)
    x0 = clean_embeddings(batch, draws.label_drop)
    t_s, w, dec = draws.t_s, draws.w, draws.decode_row
    dec3 = _col(dec)

    z_s = torch.where(src, x0, interpolate(x0, draws.eps, t_s, s.noise_scale))
    z_dec = interpolate(x0, draws.eps_decode, draws.lam, s.decode_noise_scale)  # source not restored

    # Teacher, gradient-free, on the distillation rows only.
    rows = static_decode_rows(dec, 1.0) if static_shapes else (dec == 0).nonzero().squeeze(-1)
    sc_half = torch.zeros_like(x0)
    target = torch.zeros_like(x0)
    calls = 0
    if rows.numel():
        with torch.no_grad():
            r_src, r_x0, r_z, r_t, r_w = src[rows], x0[rows], z_s[rows], t_s[rows], w[rows]
            sc_empty = torch.where(r_src, r_x0, torch.zeros_like(r_x0))
            x_hat_first = network_x(teacher, r_z, sc_empty, r_t, r_w, teacher_prediction, s)
            r_sc = torch.where(r_src, r_x0, x_hat_first * _col(draws.use_self_cond[rows]))
            z_t, x_last = teacher_trajectory(teacher, r_z, r_sc, draws.times[rows], r_w, s,
                                             prediction=teacher_prediction, source=r_src,
                                             x_clean=r_x0)
            r_target = distill_target(r_z, z_t, r_t, draws.t_t[rows], x_last)
        if static_shapes:
            sc_half, target = (torch.where(dec3 > 0, zero, r) for zero, r in
                               ((sc_half, r_sc), (target, r_target)))
        else:
            sc_half = sc_half.index_put((rows,), r_sc)
            target = target.index_put((rows,), r_target)
        calls = 1 + draws.substeps

    # Student: one forward on the mixed batch (decode rows: z̃, t = 1, mode on, self-cond zeros).
    z_main = dec3 * z_dec + (1 - dec3) * z_s
    t_main = torch.where(dec > 0, torch.ones_like(t_s), t_s)
    decode_rows = static_decode_rows(dec, s.decode_prob) if static_shapes else dec.nonzero().squeeze(-1)
    out_main, _, logits = student(torch.cat([z_main, sc_half], -1), t_main, w, dec,
                                  decode_rows=decode_rows)
    x_hat = x_from_output(out_main, z_main, t_main, student_prediction, s.t_eps, s.noise_scale)
    mse_per_token = (x_hat - target).pow(2).mean(-1)                       # (B, L)

    ce_per_token = decode_cross_entropy(logits, batch["input_ids"], decode_rows, like=mse_per_token)
    if static_shapes:
        ce_per_token = keep_decode_rows(ce_per_token, dec)
    mask = loss_mask(batch, loss_covers_padding)
    loss, ce_loss, mse_loss, sums = per_example_loss(ce_per_token, mse_per_token, dec, mask,
                                                     batch_rows)
    parts = dict(z_s=z_s, z_decode=z_dec, t_main=t_main, sc_half=sc_half, target=target,
                 x_hat=x_hat.detach(), mse_per_token=mse_per_token.detach(),
                 ce_per_token=ce_per_token.detach(), loss_mask=mask, decode_rows=decode_rows,
                 distill_rows=rows, teacher_calls=calls)
    return StepOutput(loss, ce_loss, mse_loss, sums, parts)
