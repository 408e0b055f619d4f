"""The numeric precision policy of every network forward: training, distillation, sampling, scoring.

One setting, ``precision`` (``elf.config.Experiment``), with two values:

- ``fp32``: float32 throughout, autocast off.
- ``bf16``: as the authors run on CUDA (issue 15). The ELF network's transformer blocks run under bf16
  autocast; its input projections (``self_cond_proj``, ``text_proj``), control-token embedders and both
  output heads (``final_layer``, the factored decode head) run in float32 with autocast off
  (``full_precision``, called by ``elf.model``). The residual stream entering the blocks is therefore
  float32, and stays float32 (a bf16 block output added to it is promoted), so x̂ and the logits are
  float32. The Gen. PPL scorer's weights are loaded in bf16 (``scorer_dtype``; spec §6).

Works on any device autocast supports (CUDA; CPU for the tests). No I/O.

    with network_autocast(device, "bf16"):
        out = training_step(model, batch, draws, settings)
"""

from __future__ import annotations

import torch

from elf.config import PRECISIONS


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    return precision


def network_autocast(device: torch.device | str, precision: str):
    """The context every ELF network forward runs in: bf16 autocast for ``bf16``, none for ``fp32``."""
    device_type = torch.device(device).type
    return torch.autocast(device_type, dtype=torch.bfloat16,
                          enabled=check_precision(precision) == "bf16")


def full_precision(like: torch.Tensor):
    """Autocast off on ``like``'s device: the network's float32 regions (module docstring)."""
    return torch.autocast(like.device.type, enabled=False)


def scorer_dtype(precision: str) -> torch.dtype:
    """Dtype the Gen. PPL scorer's weights are loaded in (the authors: bf16)."""
    return torch.bfloat16 if check_precision(precision) == "bf16" else torch.float32
