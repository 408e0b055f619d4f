"""Training the separate decoder of Fig. 5b (paper R11) on frozen embeddings: AdamW, cosine decay of
the lr from its peak to 0, grad-norm clip 1, token masking and logit-normal corruption drawn from
one seeded generator (``elf.decoder``). No I/O: ``elf/stages/decoder.py`` opens the store and saves.
"""

from __future__ import annotations

import math

import torch
from tqdm import tqdm

from elf.config import DecoderSettings
from elf.decoder import SeparateDecoder, decoder_loss, draw_corruption
from elf.flow.objective import loss_mask


def cosine_lr(step: int, total: int) -> float:
    """Multiplier of the peak lr at ``step``: 0.5·(1 + cos(π·step/total)), from 1 down to 0."""
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


def train_decoder(decoder: SeparateDecoder, batches, settings: DecoderSettings, *,
                  covers_padding: bool, device: torch.device, progress: bool = True) -> list[float]:
    """``settings.steps`` optimiser steps on ``batches`` (an iterator of ``{"x", "input_ids", ...}``);
    returns the loss of every step."""
    optimizer = torch.optim.AdamW(decoder.parameters(), lr=settings.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: cosine_lr(k, settings.steps))
    generator = torch.Generator().manual_seed(settings.seed * 1_000_003 + 1)  # corruption draws
    losses = []
    bar = tqdm(range(settings.steps), desc="decoder", unit="step", disable=not progress)
    for _ in bar:
        batch = next(batches)
        x = batch["x"].to(device)
        draws = draw_corruption(tuple(x.shape), settings.mask_prob, settings.noise_mean,
                                settings.noise_std, generator, device)
        loss = decoder_loss(decoder, x, batch["input_ids"].to(device),
                            loss_mask(batch, covers_padding).to(device), draws, settings.noise_scale)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decoder.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        bar.set_postfix(ce=f"{losses[-1]:.3f}")
    return losses
