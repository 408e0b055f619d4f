"""The T5 encoder behind ELF's clean embeddings (spec §2): build, train, load, pair-check and mask it.

No file I/O here; ``elf/stages/encoder.py`` reads the tokenizer and packed tokens and writes the folder.

- ``build_t5`` / ``train_span_corruption`` / ``train_encoder``: the embedded default trains a small T5 here
  with T5's span-corruption objective, then keeps its encoder (``T5EncoderModel``), which is saved with
  ``save_pretrained`` so that ``T5EncoderModel.from_pretrained(folder)`` loads it exactly as
  ``from_pretrained("t5-small")`` loads the paper's encoder on a cluster. Training (paper R06) streams
  batches of token rows in epochs (a ``ShuffledBatches`` over the token dataset: a seeded permutation
  per epoch, each row once; ``SpanCorruptor`` corrupts each batch in its prefetch thread), follows the
  paper's schedule (``encoder_lr``: linear warm-up, then cosine decay), runs on the caller's device
  under the precision policy (``elf.precision``), and hands a resumable state to the caller every
  ``checkpoint_every`` steps (the stage writes it).
- ``load_encoder`` / ``check_pairing``: load a frozen encoder by name or path; refuse a tokenizer that does not
  belong to it.
- ``encoder_mask_4d``: the per-query (2-D) attention mask of conditional encoding, in the 4-D additive form
  transformers 5 accepts for T5.

Sentinels. The tokenizer built here has no ``<extra_id_*>`` tokens, so span corruption reserves the top
``n_sentinels`` ids of an enlarged vocabulary: the T5 is built with ``len(tokenizer) + n_sentinels`` rows
and sentinel k (the k-th masked span of a sequence) is id ``len(tokenizer) + n_sentinels - 1 - k`` (counting
down from the top, as T5's ``<extra_id_0>`` = 32099 does). The saved encoder therefore has more embedding
rows than the tokenizer has ids — as ``t5-small`` does (32128 rows, 32100 tokens) — and the extra rows are
never produced by the tokenizer.
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import T5Config, T5EncoderModel, T5ForConditionalGeneration

from elf.config import EncoderSettings
from elf.precision import network_autocast

PAD_ID = 0
EOS_ID = 1
N_SENTINELS = 100  # T5's number of <extra_id_*> tokens
IGNORE_INDEX = -100  # label value the T5 loss skips


# --------------------------------------------------------------------------------------------------
# Model construction
# --------------------------------------------------------------------------------------------------

def build_t5(settings: EncoderSettings, vocab_size: int) -> T5ForConditionalGeneration:
    """A small T5 (encoder and decoder of ``settings.layers`` layers each) with pad 0, EOS 1 and decoder
    start 0, as ``t5-small``. Dropout is off (T5 v1.1 pre-trains without it); weights come from the global
    torch RNG, so seed it (``train_span_corruption`` does)."""
    if settings.d_model % settings.heads:
        raise ValueError(f"encoder d_model {settings.d_model} is not divisible by heads {settings.heads}")
    config = T5Config(
        vocab_size=vocab_size, d_model=settings.d_model, d_kv=settings.d_model // settings.heads,
        d_ff=settings.d_ff, num_layers=settings.layers, num_decoder_layers=settings.layers,
        num_heads=settings.heads, dropout_rate=0.0, feed_forward_proj="relu",
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, decoder_start_token_id=PAD_ID,
        tie_word_embeddings=True)
    return T5ForConditionalGeneration(config)


def encoder_part(model: T5ForConditionalGeneration) -> T5EncoderModel:
    """A ``T5EncoderModel`` holding copies of ``model``'s shared embedding and encoder weights."""
    config = copy.deepcopy(model.config)
    with torch.random.fork_rng(devices=[]):  # its throw-away init must not move the caller's RNG
        encoder = T5EncoderModel(config)
    wanted = {k: v for k, v in model.state_dict().items() if k.startswith(("shared.", "encoder."))}
    missing, unexpected = encoder.load_state_dict(wanted, strict=False)
    missing = [k for k in missing if k != "encoder.embed_tokens.weight"]  # tied to shared.weight
    if missing or unexpected:
        raise RuntimeError(f"encoder copy mismatch: missing {missing}, unexpected {unexpected}")
    return encoder.eval()


# --------------------------------------------------------------------------------------------------
# Span corruption (T5 pre-training objective)
# --------------------------------------------------------------------------------------------------

def sentinel_ids(vocab_size: int, n_sentinels: int = N_SENTINELS) -> list[int]:
    """Sentinel ids of a tokenizer with ``vocab_size`` ids: the top ``n_sentinels`` ids of the enlarged
    vocabulary, the first sentinel being the highest id (module docstring)."""
    top = vocab_size + n_sentinels - 1
    return [top - k for k in range(n_sentinels)]


def _random_segments(total: int, n_segments: int, generator: torch.Generator) -> np.ndarray:
    """Split ``total`` items into ``n_segments`` positive lengths, uniformly over compositions."""
    if n_segments == 1:
        return np.array([total])
    cuts = np.sort(torch.randperm(total - 1, generator=generator)[: n_segments - 1].numpy() + 1)
    return np.diff(np.concatenate([[0], cuts, [total]]))


def _noise_span_mask(n_tokens: int, noise_density: float, mean_span: float, max_spans: int,
                     generator: torch.Generator) -> np.ndarray:
    """T5's ``random_spans_noise_mask``: a bool (n_tokens,) mask with round(density·n) noise tokens in
    round(noise / mean_span) spans, alternating [keep, noise, keep, noise, ...] starting with kept tokens.
    The span count is capped at ``max_spans`` (one sentinel per span)."""
    n_noise = min(max(round(n_tokens * noise_density), 1), n_tokens - 1)
    n_spans = min(max(round(n_noise / mean_span), 1), max_spans, n_noise, n_tokens - n_noise)
    noise_lengths = _random_segments(n_noise, n_spans, generator)
    keep_lengths = _random_segments(n_tokens - n_noise, n_spans, generator)
    lengths = np.stack([keep_lengths, noise_lengths], axis=1).ravel()  # keep, noise, keep, noise, ...
    return np.repeat(np.tile([False, True], n_spans), lengths)


def _corrupt_row(tokens: np.ndarray, noise: np.ndarray, sentinels: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Encoder input (kept tokens, one sentinel per noise span) and labels (sentinel + span, ..., EOS).

    Vectorised: position i contributes two slots, [sentinel of its span if a span starts at i, its
    token]; the input keeps the token where it is not noise, the labels where it is."""
    starts = noise & ~np.concatenate([[False], noise[:-1]])
    span_sentinel = sentinels[np.cumsum(starts) - 1]  # read at span starts only
    slots = np.stack([span_sentinel, tokens], axis=1).ravel()
    inputs = slots[np.stack([starts, ~noise], axis=1).ravel()]
    labels = slots[np.stack([starts, noise], axis=1).ravel()]
    return inputs, np.append(labels, EOS_ID)


def span_corruption(input_ids: torch.Tensor, attention_mask: torch.Tensor, generator: torch.Generator,
                    noise_density: float = 0.15, mean_span: float = 3.0,
                    sentinel_ids: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """T5 span corruption of a batch.

    input_ids, attention_mask: (B, L); only positions with ``attention_mask > 0`` are real tokens (they are
    taken in order; padding is dropped). Returns ``encoder_input_ids`` (B, L_in), right-padded with PAD_ID,
    and ``labels`` (B, L_out), right-padded with -100 (ignored by the T5 loss). A row with fewer than two real
    tokens is left uncorrupted with labels ``[EOS]``. Deterministic given ``generator``.
    """
    sentinels = np.asarray([int(s) for s in sentinel_ids], dtype=np.int64)
    if not len(sentinels):
        raise ValueError("span_corruption needs sentinel_ids (see sentinel_ids())")
    encoder_rows, label_rows = [], []
    for tokens, valid in zip(input_ids.numpy(), attention_mask.numpy() > 0):
        tokens = tokens[valid].astype(np.int64)
        if len(tokens) < 2:
            encoder_rows.append(tokens)
            label_rows.append(np.array([EOS_ID]))
            continue
        noise = _noise_span_mask(len(tokens), noise_density, mean_span, len(sentinels), generator)
        inputs, labels = _corrupt_row(tokens, noise, sentinels)
        encoder_rows.append(inputs)
        label_rows.append(labels)
    return _pad_rows(encoder_rows, PAD_ID), _pad_rows(label_rows, IGNORE_INDEX)


def _pad_rows(rows: list[np.ndarray], fill: int) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------

def span_seed(seed: int, epoch: int, position: int) -> int:
    """A 63-bit generator seed for the span draws of batch ``position`` of ``epoch``."""
    key = f"elf-spans:{seed}:{epoch}:{position}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1


class SpanCorruptor:
    """The span corruption of a training batch, as a ``ShuffledBatches(..., transform=...)``: adds
    ``encoder_input_ids`` and ``labels`` (``span_corruption``) drawn from a generator seeded by (seed,
    epoch, position) alone. So it runs in the batches' prefetch thread, beside the training step, and
    the data position is all a resumed run needs to redraw it."""

    def __init__(self, seed: int, sentinels: Sequence[int]):
        self.seed, self.sentinels = seed, list(sentinels)

    def __call__(self, batch: dict[str, torch.Tensor], epoch: int, position: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(span_seed(self.seed, epoch, position))
        batch["encoder_input_ids"], batch["labels"] = span_corruption(
            batch["input_ids"], batch["attention_mask"], generator, sentinel_ids=self.sentinels)
        return batch


def _check_special_ids(tokenizer) -> None:
    if tokenizer.pad_token_id != PAD_ID or tokenizer.eos_token_id != EOS_ID:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has pad id {tokenizer.pad_token_id} and "
                         f"eos id {tokenizer.eos_token_id}; the T5 conventions need pad {PAD_ID}, eos {EOS_ID}")


def encoder_lr(step: int, settings: EncoderSettings) -> float:
    """Learning rate of optimiser step ``step`` (1 = the first; paper R06: cosine with a 0.4-epoch
    warm-up). With i = step − 1, w = ``warmup_steps``, S = ``steps``: ``lr·i/w`` while i < w, then
    ``lr·½(1 + cos(π(i − w)/(S − w)))`` — transformers' ``get_cosine_schedule_with_warmup`` read before
    its i-th ``scheduler.step()``, as ``elf.train.optim.lr_at`` reads the warm-up (with a warm-up,
    step 1 runs at lr 0)."""
    if not 1 <= step <= settings.steps:
        raise ValueError(f"encoder optimiser steps count 1..{settings.steps}, got {step}")
    if settings.warmup_steps >= settings.steps:
        raise ValueError(f"encoder warmup_steps {settings.warmup_steps} must be fewer than its steps "
                         f"{settings.steps}")
    i, w = step - 1, settings.warmup_steps
    if i < w:
        return settings.lr * i / w
    return settings.lr * 0.5 * (1.0 + math.cos(math.pi * (i - w) / (settings.steps - w)))


def train_span_corruption(settings: EncoderSettings, tokenizer, batches, *, device: torch.device | str = "cpu",
                          precision: str = "fp32", progress: bool = True, resume: dict | None = None,
                          save_state: Callable[[dict], None] | None = None,
                          after_step: Callable[[int], None] | None = None, n_sentinels: int = N_SENTINELS
                          ) -> tuple[T5ForConditionalGeneration, list[float]]:
    """Train ``build_t5`` for ``settings.steps`` steps on span-corrupted ``batches``.

    ``batches``: an endless, resumable iterator of ``{"encoder_input_ids", "labels"}`` CPU tensors
    with ``state_dict`` / ``load_state_dict`` (``ShuffledBatches`` with ``transform=SpanCorruptor(...)``:
    every row once per epoch, in a seeded order, corrupted with spans drawn from (seed, epoch,
    position)). AdamW (no weight decay), lr per step from ``encoder_lr``, grad-norm clip 1.0, the
    forward under ``network_autocast(device, precision)``. Init follows ``settings.seed``. Every
    ``checkpoint_every`` steps (not after the last) ``save_state(state)`` gets the CPU state (step,
    weights, optimiser, data position, losses); passing such a state as ``resume`` continues exactly
    where it was taken. ``after_step(step)`` runs after each step and its checkpoint (tests raise there
    to simulate a kill). Returns the whole T5 (eval mode, on ``device``) and the per-step losses."""
    from elf.device import to_cpu

    _check_special_ids(tokenizer)
    encoder_lr(settings.steps, settings)  # refuse a warm-up as long as the run before building anything
    device = torch.device(device)
    with torch.random.fork_rng(devices=[]):  # HF initialises from the global RNG
        torch.manual_seed(settings.seed)
        model = build_t5(settings, len(tokenizer) + n_sentinels)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=encoder_lr(1, settings), weight_decay=0.0)
    step, losses = 0, []
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        batches.load_state_dict(resume["data"])
        step, losses = int(resume["step"]), resume["losses"].tolist()
    autocast = network_autocast(device, precision)
    model.train()
    data = iter(batches)
    pending: list[torch.Tensor] = []  # losses still on the device: read in groups, not every step

    def flush() -> None:
        losses.extend(torch.stack(pending).float().cpu().tolist() if pending else [])
        pending.clear()

    bar = tqdm(total=settings.steps, initial=step, desc="encoder span corruption", disable=not progress)
    while step < settings.steps:
        batch = next(data)
        encoder_ids, labels = batch["encoder_input_ids"].to(device), batch["labels"].to(device)
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = encoder_lr(step, settings)
        with autocast:
            loss = model(input_ids=encoder_ids, attention_mask=(encoder_ids != PAD_ID).long(),
                         labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        pending.append(loss.detach())
        bar.update(1)
        if len(pending) >= 50 or step == settings.steps:
            flush()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if save_state is not None and step % settings.checkpoint_every == 0 and step < settings.steps:
            flush()
            save_state(to_cpu(dict(step=step, model=model.state_dict(), optimizer=optimizer.state_dict(),
                                   data=batches.state_dict(), losses=torch.tensor(losses, dtype=torch.float64))))
        if after_step is not None:
            after_step(step)
    bar.close()
    return model.eval(), losses


def train_encoder(settings: EncoderSettings, tokenizer, batches, **kwargs) -> T5EncoderModel:
    """Span-corruption training (``train_span_corruption``, same keywords), then the trained encoder part."""
    model, _ = train_span_corruption(settings, tokenizer, batches, **kwargs)
    return encoder_part(model.cpu())


# --------------------------------------------------------------------------------------------------
# Loading and pairing
# --------------------------------------------------------------------------------------------------

def load_encoder(name_or_path: str) -> T5EncoderModel:
    """A T5 encoder by Hub reference (``hub:t5-small``, ``hub:name@revision``) or saved folder, fp32,
    in eval mode, with gradients off."""
    from elf.hub import pretrained_kwargs

    name, kwargs = pretrained_kwargs(name_or_path, "encoder")
    encoder = T5EncoderModel.from_pretrained(name, dtype=torch.float32, **kwargs)
    encoder.eval()
    encoder.requires_grad_(False)
    return encoder


def check_pairing(tokenizer, encoder: T5EncoderModel) -> None:
    """Refuse a wrong tokenizer/encoder pairing: raise ValueError naming both when the tokenizer has more
    ids than the encoder has embedding rows, or its pad/eos ids differ from the encoder config's."""
    rows = encoder.get_input_embeddings().num_embeddings
    names = (f"tokenizer {tokenizer.name_or_path!r} and encoder "
             f"{getattr(encoder.config, '_name_or_path', '') or '<unsaved>'!r}")
    problems = []
    if len(tokenizer) > rows:
        problems.append(f"the tokenizer has {len(tokenizer)} ids but the encoder only {rows} embedding rows")
    for what in ("pad", "eos"):
        tok_id = getattr(tokenizer, f"{what}_token_id")
        enc_id = getattr(encoder.config, f"{what}_token_id")
        if tok_id != enc_id:
            problems.append(f"{what} id {tok_id} (tokenizer) != {enc_id} (encoder)")
    if problems:
        raise ValueError(f"{names} do not belong together: " + "; ".join(problems))


# --------------------------------------------------------------------------------------------------
# Conditional attention mask (spec §2)
# --------------------------------------------------------------------------------------------------

def encoder_mask_4d(attention_mask: torch.Tensor, cond_seq_mask: torch.Tensor,
                    drop_source: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The encoder's per-query mask as a (B, 1, L, L) additive mask: 0 allowed, finfo(dtype).min not.

    Spec §2: source rows attend to valid source columns only; every other row attends to every valid
    column, except that for ``drop_source`` rows it may not attend to source columns. "Every other row"
    includes padding query rows, as in the released code (checked against the parity fixture's
    ``encoder_attention_mask``); for unconditional data this is exactly HF's usual 2-D padding mask.
    A row that would see no column at all (an all-padding sequence, or a dropped-source row without
    target tokens) attends to itself only, so the softmax stays finite; such rows never enter the loss.
    """
    valid = attention_mask > 0  # (B, L)
    source = (cond_seq_mask > 0) & valid  # (B, L)
    if drop_source is None:
        drop_source = torch.zeros(valid.shape[0], dtype=torch.bool, device=valid.device)
    drop_source = drop_source.bool().view(-1, 1, 1)
    source_row = (cond_seq_mask > 0)[:, :, None]  # (B, L, 1)
    allowed = torch.where(source_row, source[:, None, :],
                          valid[:, None, :] & ~(drop_source & source[:, None, :]))  # (B, L, L)
    blind = ~allowed.any(dim=-1, keepdim=True)  # (B, L, 1)
    allowed = allowed | (blind & torch.eye(valid.shape[1], dtype=torch.bool, device=valid.device))
    additive = torch.zeros(allowed.shape, dtype=dtype, device=valid.device)
    return additive.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]  # (B, 1, L, L)
