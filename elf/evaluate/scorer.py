"""The Gen. PPL scorer: GPT-2 Large by name (paper), or a small GPT-2 trained here (embedded default).

The embedded scorer mirrors GPT-2's recipe at toy size: a byte-level BPE tokenizer whose only special
token is ``<|endoftext|>`` (EOS = BOS = UNK, no padding token, no added BOS), and a ``GPT2LMHeadModel``
trained from scratch with AdamW on held-out text, documents joined with EOS and cut into context-length
blocks. It is saved with ``save_pretrained`` so that ``load_scorer`` reads it exactly as it reads
``gpt2-large`` from the hub: the scoring code has one path.

No I/O here except ``save_scorer`` / ``load_scorer``; ``elf scorer`` (elf/stages/scorer.py) reads the corpus.

    tokenizer = train_bpe_tokenizer(texts, vocab_size=1024, context=256)
    model, losses = train_scorer_model(texts, tokenizer, settings)
    save_scorer(model, tokenizer, "results/scorer", provenance)
    model, tokenizer = load_scorer("results/scorer")      # or load_scorer("gpt2-large", "cuda", torch.bfloat16)
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,
                          PreTrainedTokenizerFast)

from elf.artifacts.names import PROVENANCE_FILE
from elf.config import ScorerSettings
from elf.io import atomic_dir, write_json

EOS_TOKEN = "<|endoftext|>"


# --------------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------------

def train_bpe_tokenizer(texts: Sequence[str], vocab_size: int, context: int) -> PreTrainedTokenizerFast:
    """A GPT-2-like byte-level BPE tokenizer trained on ``texts`` (at most ``vocab_size`` entries)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN,
                                   unk_token=EOS_TOKEN, model_max_length=context)


def pack_documents(texts: Sequence[str], tokenizer, context: int) -> torch.Tensor:
    """(n_blocks, context) token ids: every document followed by EOS, concatenated, cut into blocks
    (the incomplete tail is dropped)."""
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]:
        stream.extend(ids)
        stream.append(tokenizer.eos_token_id)
    n_blocks = len(stream) // context
    if n_blocks == 0:
        raise ValueError(f"the corpus has {len(stream)} tokens, fewer than one context of {context}")
    return torch.tensor(stream[:n_blocks * context], dtype=torch.long).view(n_blocks, context)


# --------------------------------------------------------------------------------------------------
# Model and training
# --------------------------------------------------------------------------------------------------

def build_scorer_model(settings: ScorerSettings, tokenizer, seed: int) -> GPT2LMHeadModel:
    """A freshly initialised GPT-2 of the settings' shape; the init draws come from ``seed``."""
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=settings.context, n_embd=settings.width,
                        n_layer=settings.layers, n_head=settings.heads,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        # no dropout: a few hundred steps on a small corpus, and no unseeded draws
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    with torch.random.fork_rng(devices=[]):  # HF init draws from the global RNG; keep it seeded, local
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config)


def learning_rate(step: int, settings: ScorerSettings) -> float:
    """Linear warm-up over the first 10% of steps, then cosine decay to 10% of ``settings.lr``."""
    warmup = max(1, settings.steps // 10)
    if step < warmup:
        return settings.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, settings.steps - warmup)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_scorer_model(texts: Sequence[str], tokenizer, settings: ScorerSettings,
                       device: str | torch.device = "cpu",
                       progress: bool = True) -> tuple[GPT2LMHeadModel, list[float]]:
    """Train a GPT-2 scorer from scratch on ``texts``; returns the model (eval mode) and per-step losses."""
    blocks = pack_documents(texts, tokenizer, settings.context)
    model = build_scorer_model(settings, tokenizer, settings.seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                                  weight_decay=0.01)
    generator = torch.Generator().manual_seed(settings.seed)
    losses = []
    model.train()
    bar = tqdm(range(settings.steps), desc="scorer", unit="step", disable=not progress)
    for step in bar:
        rows = torch.randint(0, blocks.shape[0], (settings.batch_size,), generator=generator)
        batch = blocks[rows].to(device)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return model.eval(), losses


# --------------------------------------------------------------------------------------------------
# Saving and loading
# --------------------------------------------------------------------------------------------------

def save_scorer(model, tokenizer, out_dir: str | os.PathLike, provenance: dict) -> None:
    """``save_pretrained`` model and tokenizer plus ``provenance.json`` into ``out_dir``, atomically."""
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(Path(tmp) / PROVENANCE_FILE, provenance)


def load_scorer(name_or_path: str | os.PathLike, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32):
    """(model in eval mode on ``device`` with weights in ``dtype``, tokenizer with pad = EOS) from a
    folder or a Hub reference (``hub:name@revision``, elf/hub.py; the authors load GPT-2 Large in bf16:
    ``elf.precision.scorer_dtype``)."""
    from elf.hub import pretrained_kwargs

    name, kwargs = pretrained_kwargs(str(name_or_path), "scorer")
    tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **kwargs).to(device).eval()
    return model, tokenizer
