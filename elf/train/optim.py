"""Optimiser, learning-rate schedule, gradient clipping and EMA of ELF (spec §4 "Optimiser").

Pure maths, no I/O: the training stage builds an optimiser with ``build_optimizer`` and calls, per
optimiser step k = 1, 2, ...::

    grad_norm, clip_scale = clip_grad_norm(model.parameters(), settings.grad_clip)
    opt.set_lr(lr_at(k, settings, batch_size))
    opt.step(); opt.zero_grad()
    ema.update(model)

Both halves reproduce the authors' released code (which follows ``optax.contrib.muon``) to float
precision; ``tests/test_optim.py`` checks them against ``shared/fixtures/optimizer_steps.pt`` and the
EMA of the training-step fixtures.

* ``Muon`` — every 2-D weight. Nesterov momentum with bias correction, at step k::

      m ← lerp(m, g, 1 − β)
      u = β·m / (1 − β^(k+1)) + (1 − β)·g / (1 − β^k)
      X = NewtonSchulz5(u / (‖u‖_F + 1e-8))            # fp32, on uᵀ when rows > cols
      p ← p − lr·(sqrt(max(1, fan_out / fan_in))·X + wd·p)

  Newton–Schulz runs matrices of one shape as one batch and folds its scalars into the matmuls
  (``baddbmm``): the same iteration up to fp32 rounding (``tests/test_fast_paths.py``). At lr 0
  (warm-up step 1) it is skipped: the weights would not move.

  fan_out / fan_in is rows / cols for ``nn.Linear`` weights stored (out, in) and cols / rows for the
  decode-head kernels stored (in, out) (``stored_in_out`` param-group flag).
* ``NesterovAdam`` — every other parameter (biases, gains, control tokens)::

      m ← lerp(m, g, 1 − β1);  v ← lerp(v, g², 1 − β2)
      m̂ = β1·m / (1 − β1^(k+1)) + (1 − β1)·g / (1 − β1^k);  v̂ = v / (1 − β2^k)
      p ← p − lr·(m̂ / (sqrt(v̂) + eps) + wd·p)

Why not ``torch.optim.Muon`` (torch ≥ 2.9)? It is a different optimiser in five ways, each of which
changes the numbers: Newton–Schulz runs in bf16 (moves the training fixtures' first step by 3.4e-4 to
5.8e-4 at lr 2e-3); its Nesterov update ``lerp(g, m, β)`` has no bias correction (the first update is
~15× smaller before Newton–Schulz, and ``optimizer_steps.pt`` steps 2–3 move by 3.5e-4); it normalises by
``max(‖u‖_F, 1e-7)`` rather than ``‖u‖_F + 1e-8``; its default weight decay is 0.1 (the released
code uses 0); and its lr scale ``sqrt(max(1, A/B))`` reads the raw first two dims, which is wrong for
the (in, out) decode kernels (``unembed_kernel`` would be scaled by 1 instead of sqrt(512/64)).
It also has no Adam half. Removing all of that leaves this class, so we keep our own.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from elf.config import OptimSettings

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
IN_OUT_NAMES = ("proj_kernel", "unembed_kernel")


# --------------------------------------------------------------------------------------------------
# Muon
# --------------------------------------------------------------------------------------------------

def newton_schulz(update: Tensor, steps: int = 5, coefficients=NS_COEFFICIENTS, eps: float = 1e-8,
                  dtype: torch.dtype = torch.float32) -> Tensor:
    """Approximate orthogonalisation (the quintic iteration of Muon) of a 2-D ``update``, or of each
    matrix of a (G, rows, cols) stack at once, in ``dtype``.

    Works on the transpose when rows > cols so the Gram matrix is the smaller one; returns ``dtype``.
    """
    if update.ndim not in (2, 3):
        raise ValueError(f"Newton–Schulz needs a 2-D tensor or a stack of them, got shape "
                         f"{tuple(update.shape)}")
    a, b, c = coefficients
    x = update.to(dtype)
    single = x.ndim == 2
    if single:
        x = x[None]
    transposed = x.shape[-2] > x.shape[-1]
    if transposed:
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + eps)
    for _ in range(steps):
        # x ← a·x + (b·G + c·G²)·x with G = x·xᵀ, the scalings folded into the matmuls (baddbmm).
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    if transposed:
        x = x.mT
    return x[0] if single else x


def newton_schulz_many(updates: list[Tensor], **settings) -> list[Tensor]:
    """``newton_schulz`` of every matrix in ``updates``; matrices of one shape go through the
    iteration as one (G, rows, cols) stack (batched matmuls: the same per-matrix arithmetic, a
    fraction of the calls)."""
    by_shape: dict[tuple, list[int]] = {}
    for i, u in enumerate(updates):
        by_shape.setdefault(tuple(u.shape), []).append(i)
    out: list[Tensor] = [None] * len(updates)  # type: ignore[list-item]
    for indices in by_shape.values():
        stack = torch.stack([updates[i] for i in indices])
        for i, x in zip(indices, newton_schulz(stack, **settings).unbind(0)):
            out[i] = x
    return out


def muon_scale(shape: torch.Size | tuple[int, ...], stored_in_out: bool) -> float:
    """``sqrt(max(1, fan_out/fan_in))`` for a weight stored (out, in), or (in, out) if ``stored_in_out``."""
    rows, cols = shape
    fan_out, fan_in = (cols, rows) if stored_in_out else (rows, cols)
    return math.sqrt(max(1.0, fan_out / fan_in))


def nesterov_coefficients(beta: float, step: int, bias_correction: bool = True) -> tuple[float, float]:
    """(a, b) with the Nesterov update ``a·m + b·g`` at step ``step`` ≥ 1 (optax's bias-corrected form)."""
    if not bias_correction:
        return beta, 1.0 - beta
    return beta / (1.0 - beta ** (step + 1)), (1.0 - beta) / (1.0 - beta ** step)


class Muon(torch.optim.Optimizer):
    """Muon for 2-D tensors, as the released ELF code (see the module docstring for the update).

    Param-group options: ``lr``; ``momentum`` (0.95); ``ns_steps`` (5); ``ns_coefficients``;
    ``ns_eps`` (1e-8, added to the Frobenius norm); ``ns_dtype`` (float32; bf16 only to reproduce
    torch's variant); ``weight_decay`` (decoupled, 0); ``bias_correction`` (True; False gives the
    uncorrected Nesterov momentum of ``torch.optim.Muon``); ``stored_in_out`` (False: tensors are
    stored (out, in) like ``nn.Linear.weight``; True: (in, out), fan-out = columns).
    State per tensor: ``step`` (int, updates done) and ``momentum_buffer``. A parameter whose
    ``grad`` is None is stepped with a zero gradient (the authors' behaviour), not skipped.
    """

    def __init__(self, params, lr: float = 2e-3, momentum: float = 0.95, ns_steps: int = 5,
                 ns_coefficients: tuple[float, float, float] = NS_COEFFICIENTS, ns_eps: float = 1e-8,
                 ns_dtype: torch.dtype = torch.float32, weight_decay: float = 0.0,
                 bias_correction: bool = True, stored_in_out: bool = False):
        if lr < 0 or not 0 <= momentum < 1 or weight_decay < 0 or ns_steps < 0:
            raise ValueError(f"bad Muon hyper-parameters: lr={lr}, momentum={momentum}, "
                             f"weight_decay={weight_decay}, ns_steps={ns_steps}")
        defaults = dict(lr=lr, momentum=momentum, ns_steps=ns_steps,
                        ns_coefficients=tuple(ns_coefficients), ns_eps=ns_eps, ns_dtype=ns_dtype,
                        weight_decay=weight_decay, bias_correction=bias_correction,
                        stored_in_out=stored_in_out)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon takes 2-D tensors only, got shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Momentum and Nesterov updates per group (foreach), then one batched Newton–Schulz per
        # setting and shape across groups, then the parameter updates.
        pending: dict[tuple, list[tuple[Tensor, Tensor, dict]]] = {}
        for group in self.param_groups:
            params = group["params"]
            if not params:
                continue
            # A missing gradient counts as zero, as in the authors' Muon: the momentum still
            # decays and is applied (a parameter idle on this batch keeps moving).
            grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
            updates = self._nesterov(params, grads, group)
            if group["lr"] == 0:  # p − 0·(X + wd·p) = p: skip Newton–Schulz (warm-up step 1)
                continue
            key = (group["ns_steps"], group["ns_coefficients"], group["ns_eps"], group["ns_dtype"])
            pending.setdefault(key, []).extend((p, u, group) for p, u in zip(params, updates))
        for (steps, coefficients, eps, dtype), items in pending.items():
            orthos = newton_schulz_many([u for _, u, _ in items], steps=steps,
                                        coefficients=coefficients, eps=eps, dtype=dtype)
            for (p, _, group), ortho in zip(items, orthos):
                self._apply(p, ortho.to(p.dtype), group)
        return loss

    def _nesterov(self, params: list[Tensor], grads: list[Tensor], group: dict) -> list[Tensor]:
        """m ← lerp(m, g, 1 − β), then the bias-corrected Nesterov update a·m + b·g per tensor."""
        beta = group["momentum"]
        bufs, steps = [], []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["momentum_buffer"] = torch.zeros_like(p)
            state["step"] += 1
            bufs.append(state["momentum_buffer"])
            steps.append(state["step"])
        torch._foreach_lerp_(bufs, grads, 1.0 - beta)
        updates: list[Tensor] = [None] * len(params)  # type: ignore[list-item]
        for step in set(steps):  # one value unless parameters joined at different steps
            idx = [i for i, k in enumerate(steps) if k == step]
            coef_m, coef_g = nesterov_coefficients(beta, step, group["bias_correction"])
            mixed = torch._foreach_add(torch._foreach_mul([bufs[i] for i in idx], coef_m),
                                       torch._foreach_mul([grads[i] for i in idx], coef_g))
            for i, u in zip(idx, mixed):
                updates[i] = u
        return updates

    @staticmethod
    def _apply(p: Tensor, ortho: Tensor, group: dict) -> None:
        scale = muon_scale(p.shape, group["stored_in_out"])
        if group["weight_decay"]:
            p.add_(p, alpha=-group["lr"] * group["weight_decay"])
        p.add_(ortho, alpha=-group["lr"] * scale)


# --------------------------------------------------------------------------------------------------
# Nesterov-Adam
# --------------------------------------------------------------------------------------------------

class NesterovAdam(torch.optim.Optimizer):
    """Adam with optax's bias-corrected Nesterov momentum (``optax.nadam``-style), decoupled decay.

    State per tensor: ``step`` (int), ``exp_avg`` (m) and ``exp_avg_sq`` (v).
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"bad NesterovAdam hyper-parameters: lr={lr}, betas={betas}, eps={eps}, "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                self._update(p, p.grad, state, group)
        return loss

    @staticmethod
    def _update(p: Tensor, grad: Tensor, state: dict, group: dict) -> None:
        beta1, beta2 = group["betas"]
        step = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.lerp_(grad, 1.0 - beta1)
        v.lerp_(grad * grad, 1.0 - beta2)
        coef_m, coef_g = nesterov_coefficients(beta1, step)
        m_hat = m * coef_m + grad * coef_g
        v_hat = v / (1.0 - beta2 ** step)
        if group["weight_decay"]:
            p.add_(p, alpha=-group["lr"] * group["weight_decay"])
        p.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))


# --------------------------------------------------------------------------------------------------
# The optimiser the training loop sees
# --------------------------------------------------------------------------------------------------

def _is_in_out(name: str, in_out_names: Iterable[str]) -> bool:
    # Prefixed names (``_orig_mod.proj_kernel`` under torch.compile, ``net.proj_kernel``) match too.
    return any(name == n or name.endswith("." + n) for n in in_out_names)


class ElfOptimizer:
    """One object over the optimisers of a run: ``step``, ``zero_grad``, ``set_lr``, exact resume.

    ``partition`` maps ``"muon"``, ``"muon_in_out"``, ``"adam"`` (Muon recipe) or ``"adamw"`` to the
    parameter names in each, so a test or log can check who went where.
    """

    def __init__(self, kind: str, optimizers: list[torch.optim.Optimizer],
                 partition: dict[str, list[str]]):
        self.kind = kind
        self.optimizers = optimizers
        self.partition = partition

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def set_lr(self, lr: float) -> None:
        """Set the same learning rate on every group (both Muon and Adam use one lr, spec §4)."""
        for group in self.param_groups:
            group["lr"] = lr

    def state_dict(self) -> dict[str, Any]:
        """Moments, step counters and hyper-parameters of every optimiser (references, as torch does)."""
        return {"kind": self.kind, "partition": copy.deepcopy(self.partition),
                "optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from ``state_dict()``; a copy is taken, so ``state`` is never modified later."""
        if state.get("kind") != self.kind or state.get("partition") != self.partition:
            raise ValueError(f"optimiser state is for kind {state.get('kind')!r} with a different "
                             f"parameter partition; this run uses {self.kind!r}")
        saved = state["optimizers"]
        if len(saved) != len(self.optimizers):
            raise ValueError(f"optimiser state has {len(saved)} optimisers, expected {len(self.optimizers)}")
        for opt, opt_state in zip(self.optimizers, saved):
            opt.load_state_dict(copy.deepcopy(opt_state))


def build_optimizer(named_params: Iterable[tuple[str, nn.Parameter]], settings: OptimSettings,
                    lr: float, in_out_names: Iterable[str] = IN_OUT_NAMES) -> ElfOptimizer:
    """The optimiser of spec §4 over the trainable ``named_params``.

    ``settings.name == "muon"``: every 2-D tensor → ``Muon`` (those named in ``in_out_names``, by full
    name or dotted suffix, flagged as stored (in, out)), every other tensor → ``NesterovAdam`` with
    ``settings.betas``; one lr; ``settings.weight_decay`` on both. ``"adamw"``: ``torch.optim.AdamW``
    (lr, ``settings.betas``, ``settings.weight_decay``, eps 1e-8) on everything.
    """
    named = [(n, p) for n, p in named_params if p.requires_grad]
    if not named:
        raise ValueError("build_optimizer: no trainable parameters")
    in_out_names = tuple(in_out_names)
    wd = settings.weight_decay
    if settings.name == "adamw":
        opt = torch.optim.AdamW([p for _, p in named], lr=lr, betas=tuple(settings.betas),
                                eps=1e-8, weight_decay=wd)
        return ElfOptimizer("adamw", [opt], {"adamw": [n for n, _ in named]})
    if settings.name != "muon":
        raise ValueError(f"unknown optimiser {settings.name!r}; expected 'muon' or 'adamw'")

    groups: dict[str, list[tuple[str, nn.Parameter]]] = {"muon": [], "muon_in_out": [], "adam": []}
    for name, p in named:
        if p.ndim != 2:
            groups["adam"].append((name, p))
        elif _is_in_out(name, in_out_names):
            groups["muon_in_out"].append((name, p))
        else:
            groups["muon"].append((name, p))
    muon_groups = [{"params": [p for _, p in groups[key]], "stored_in_out": key == "muon_in_out"}
                   for key in ("muon", "muon_in_out") if groups[key]]
    optimizers: list[torch.optim.Optimizer] = []
    if muon_groups:
        optimizers.append(Muon(muon_groups, lr=lr, weight_decay=wd))
    if groups["adam"]:
        optimizers.append(NesterovAdam([p for _, p in groups["adam"]], lr=lr,
                                       betas=tuple(settings.betas), weight_decay=wd))
    partition = {key: [n for n, _ in members] for key, members in groups.items()}
    return ElfOptimizer("muon", optimizers, partition)


def lr_at(step: int, settings: OptimSettings, batch_size: int) -> float:
    """Learning rate of optimiser step ``step`` (1 = the first step).

    ``base = blr·batch_size/256``; with ``warmup_steps = w > 0`` step k gets ``base·min(1, (k−1)/w)``,
    the authors' ``LambdaLR(lambda i: min(1, i/w))`` read before its i-th ``scheduler.step()``: step 1
    runs at lr 0 (the optimiser's moments and step counts still advance, the weights do not move) and
    step w + 1 is the first at ``base``; constant ``base`` afterwards.
    """
    if step < 1:
        raise ValueError(f"optimiser steps count from 1, got {step}")
    base = settings.blr * batch_size / 256
    if settings.warmup_steps > 0 and step <= settings.warmup_steps:
        return base * (step - 1) / settings.warmup_steps
    return base


# --------------------------------------------------------------------------------------------------
# Gradient clipping
# --------------------------------------------------------------------------------------------------

def clip_grad_norm(params: Iterable[Tensor], max_norm: float, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Scale every gradient by ``min(1, max_norm/(‖g‖ + eps))``, ‖g‖ the global L2 norm.

    Returns ``(grad_norm, scale)`` as 0-dim float32 tensors on the gradients' device (no host sync;
    call ``.item()`` to log). ``max_norm == 0`` disables clipping (scale 1, norm still measured).
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        zero = torch.zeros(())
        return zero, torch.ones(())
    per_tensor = torch.stack(torch._foreach_norm([g.float() for g in grads]))
    grad_norm = torch.linalg.vector_norm(per_tensor)
    if max_norm <= 0:
        return grad_norm, torch.ones_like(grad_norm)
    scale = torch.clamp(max_norm / (grad_norm + eps), max=1.0)
    for dtype in {g.dtype for g in grads}:
        torch._foreach_mul_([g for g in grads if g.dtype == dtype], scale.to(dtype))
    return grad_norm, scale


# --------------------------------------------------------------------------------------------------
# EMA
# --------------------------------------------------------------------------------------------------

def _named_tensors(source: nn.Module | Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]):
    if isinstance(source, nn.Module):
        return list(source.named_parameters())
    if isinstance(source, Mapping):
        return list(source.items())
    return list(source)


class EMA:
    """Float32 exponential moving average of named parameters, updated once per optimiser step.

    ``update`` computes ``ema + (1 − decay)·(p − ema)`` (``torch.lerp``): this reproduces the fixtures'
    ``ema_after`` bit for bit, whereas the two-rounding ``ema·decay + (1 − decay)·p`` is up to 1.2e-7
    off (fixtures README, EMA note). With ``warmup`` the decay of the
    k-th update (k = 1, 2, ...) is ``min(decay, (1 + k)/(10 + k))``, so short runs are not stuck at
    the initialisation (spec §4: 0.9999 barely moves in a few thousand steps).
    Sources (``__init__``, ``update``): an ``nn.Module``, a mapping name → tensor, or (name, tensor) pairs.
    """

    def __init__(self, params, decay: float = 0.9999, warmup: bool = False):
        if not 0 <= decay <= 1:
            raise ValueError(f"EMA decay must be in [0, 1], got {decay}")
        self.decay = decay
        self.warmup = warmup
        self.num_updates = 0
        self.shadow: dict[str, Tensor] = {
            name: p.detach().to(torch.float32, copy=True) for name, p in _named_tensors(params)}

    def decay_at(self, k: int) -> float:
        """Decay of the k-th update (k ≥ 1)."""
        return min(self.decay, (1 + k) / (10 + k)) if self.warmup else self.decay

    @torch.no_grad()
    def update(self, params) -> None:
        named = dict(_named_tensors(params))
        if named.keys() != self.shadow.keys():
            missing = sorted(self.shadow.keys() ^ named.keys())
            raise ValueError(f"EMA parameter names differ from the model's: {missing[:5]}")
        self.num_updates += 1
        decay = self.decay_at(self.num_updates)
        torch._foreach_lerp_(list(self.shadow.values()),
                             [named[name].detach().float() for name in self.shadow], 1.0 - decay)

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Write the averaged weights into ``model``'s parameters (cast to their dtype)."""
        params = dict(model.named_parameters())
        for name, ema in self.shadow.items():
            if name not in params:
                raise ValueError(f"EMA holds {name!r}, which the model does not have")
            params[name].copy_(ema)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "warmup": self.warmup, "num_updates": self.num_updates,
                "shadow": dict(self.shadow)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        shadow = state["shadow"]
        if shadow.keys() != self.shadow.keys():
            raise ValueError("EMA state holds different parameter names than this model")
        for name, ema in self.shadow.items():
            if shadow[name].shape != ema.shape:
                raise ValueError(f"EMA state for {name!r} has shape {tuple(shadow[name].shape)}, "
                                 f"expected {tuple(ema.shape)}")
            ema.copy_(shadow[name])
        self.decay, self.warmup = float(state["decay"]), bool(state["warmup"])
        self.num_updates = int(state["num_updates"])
