"""Embedding kind ``learned`` (paper R10; spec §8 "learned jointly"): a token-embedding table trained
with the flow, tied to the decode head's unembedding and renormalised after every optimiser step.

The table IS the network's unembedding ``unembed_kernel`` (stored (d, V) as in the released
checkpoints, spec §3), read as V rows of width d. So it is trained, EMA-averaged, saved and resumed
with the network, and ``elf sample`` decodes with it (``ELF.decode``) without knowing it is learned:
- clean embeddings  x = (row[token] − mean) / std   (fixed normalisation, spec §2);
- decode logits     GELU(h·proj_kernel + proj_bias) · rowsᵀ + unembed_bias  (``ELF.decode``);
- after each optimiser step every row is rescaled to RMS ``ROW_RMS`` = 1 (norm √d): the scale of
  its N(0, 1) initialisation and of the Gaussian kind's rows (R09). The paper says "renormalised
  every step" without the target: not stated in the paper (config/paper.yaml ``unstated``).
- the flow loss reaches the table through the network input, the noisy state and the decode
  cross-entropy, and also through the denoise target x: the shared objective detaches its target v*
  (spec §4 step 4), so ``target_gradient`` adds the term that detach hides (not stated in the paper).

No I/O. The training stage (``elf/stages/train.py``) wires it in:

    table = TiedTable(model, mean=emb.mean, std=emb.std)
    table.init_(seed=run.budget.seed)
    train(model, run, token_batches, out, meta, ..., step_fn=learned_step(table, run, covers_padding),
          after_step=table.renormalise_)
"""

from __future__ import annotations

import dataclasses

import torch

from elf.config import ObjectiveSettings, RunSettings
from elf.flow.objective import StepDraws, StepOutput, clean_embeddings, training_step
from elf.flow.paths import velocity

ROW_RMS = 1.0


def renormalise_rows(rows: torch.Tensor, rms: float = ROW_RMS) -> torch.Tensor:
    """``rows`` (V, d) each rescaled to root-mean-square ``rms`` (norm rms·√d)."""
    row_rms = rows.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)
    return rows * (rms / row_rms)


class TiedTable:
    """The learned table of an ELF network with a decode head: a (V, d) view of its unembedding."""

    def __init__(self, model: torch.nn.Module, mean: float = 0.0, std: float = 1.0, rms: float = ROW_RMS):
        if not model.cfg.decode_head:
            raise ValueError("a learned embedding table is tied to the decode head's unembedding: "
                             "the network needs model.decode_head: true")
        self.model, self.mean, self.std, self.rms = model, mean, std, rms

    @property
    def rows(self) -> torch.Tensor:
        """(V, d): row v embeds token v. Shares storage (and gradient) with ``unembed_kernel``."""
        return self.model.unembed_kernel.t()

    @torch.no_grad()
    def init_(self, seed: int) -> None:
        """N(0, 1) rows from a generator seeded with ``seed``, renormalised (replaces the Xavier init)."""
        vocab, dim = self.rows.shape
        draw = torch.randn(vocab, dim, generator=torch.Generator().manual_seed(seed))
        self.rows.copy_(renormalise_rows(draw, self.rms))

    @torch.no_grad()
    def renormalise_(self) -> None:
        """Rescale every row to RMS ``rms`` in place: call after each optimiser step."""
        self.rows.copy_(renormalise_rows(self.rows, self.rms))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Normalised clean embeddings x (B, L, d), differentiable with respect to the table."""
        return (self.rows[input_ids] - self.mean) / self.std

    def with_embeddings(self, batch: dict) -> dict:
        """``batch`` plus ``x`` (and ``x_nosource``: a token table ignores the source, so label-dropped
        rows see the same target embeddings, spec §2 'Label drop')."""
        x = self.embed(batch["input_ids"])
        return {**batch, "x": x, "x_nosource": x}


def target_gradient(out: StepOutput, x0: torch.Tensor, draws: StepDraws, s: ObjectiveSettings,
                    denominator: torch.Tensor | None = None) -> torch.Tensor:
    """A zero-valued loss term whose gradient is the one the detached target hides.

    ``training_step`` minimises Σ mask·mean_d(v̂ − v*)² / denominator with v* = v + guidance detached.
    Adding Σ (∂L/∂v*)·v(x0) (with ∂L/∂v* = −2(v̂ − v*)/d · mask / denominator held constant) and
    subtracting its value gives the gradient of the same loss with v = (x0 − z_t)/max(1 − t, t_eps)
    left differentiable, the guidance term still detached; the loss value is unchanged."""
    parts = out.parts
    z_t, t = parts["z_t"], draws.t
    denoise_tokens = parts["loss_mask"] * (1 - draws.decode_row[:, None])            # (B, L)
    denom = parts["loss_mask"].sum().clamp_min(1) if denominator is None else denominator
    v_hat = velocity(parts["x_hat"], z_t.detach(), t, s.t_eps)
    d_loss_d_target = (-2 * (v_hat - parts["v_star"]) / x0.shape[-1]
                       * denoise_tokens[..., None] / denom).detach()
    surrogate = (d_loss_d_target * velocity(x0, z_t, t, s.t_eps)).sum()
    return surrogate - surrogate.detach()


def learned_step(table: TiedTable, run: RunSettings, loss_covers_padding: bool,
                 through_target: bool = True, static_shapes: bool = False):
    """The ``step_fn`` of ``elf.train.loop.train`` for a learned table: embed the token-only batch
    with the table, run spec §4's ``training_step`` and (``through_target``) add ``target_gradient``.
    ``static_shapes``: ``training_step``'s (XLA)."""
    def step(net, batch: dict, draws: StepDraws, denominator: torch.Tensor | None) -> StepOutput:
        batch = table.with_embeddings(batch)
        out = training_step(net, batch, draws, run.objective, prediction=run.model.prediction,
                            loss_covers_padding=loss_covers_padding, denominator=denominator,
                            first_pass_all_rows=False, static_shapes=static_shapes)
        if not through_target:
            return out
        x0 = clean_embeddings(batch, draws.label_drop)
        extra = target_gradient(out, x0, draws, run.objective, denominator)
        return dataclasses.replace(out, loss=out.loss + extra)
    return step
