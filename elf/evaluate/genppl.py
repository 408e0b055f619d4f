"""Generative perplexity of texts under a causal LM scorer (GPT-2 Large in the paper), spec §6.

Pure computation: the caller passes the texts, the model and its tokenizer (``elf score`` loads them).

Protocol (the released scorer, reproduced exactly):
- retokenise each text with the scorer's tokenizer, truncated to 1024 tokens (or the model's context if
  smaller); texts with no token are skipped and counted (``n_empty``);
- batches of ``batch_size`` (64) consecutive samples, right-padded with EOS to the batch's longest;
- token NLLs from position 1 on; a target position counts if its token is not EOS, or if it is the
  sequence's first EOS. For a sample without an EOS of its own that first EOS is its first padding token,
  so every sample but the batch's longest is charged one EOS prediction: the score depends on the batching;
- corpus PPL = exp(Σ counted NLL / Σ counted tokens).

    from elf.evaluate.genppl import gen_ppl
    result = gen_ppl(texts, model, tokenizer, batch_size=64)   # {"gen_ppl", "n_empty", ...}
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

GPT2_CONTEXT = 1024  # the released scorer truncates at 1024 tokens (spec §6)


def scoring_context(model, max_length: int = GPT2_CONTEXT) -> int:
    """Longest sequence scored: ``max_length``, or the model's context if that is smaller."""
    model_context = getattr(model.config, "n_positions", None) or \
        getattr(model.config, "max_position_embeddings", None)
    return min(max_length, model_context) if model_context else max_length


def retokenize(texts: Sequence[str], tokenizer, max_length: int | None) -> list[list[int]]:
    """Token ids of each text under ``tokenizer``, truncated to ``max_length`` (None: untruncated)."""
    if not texts:
        return []
    if max_length is None:
        encoded = tokenizer(list(texts), truncation=False, verbose=False)  # no length warning
    else:
        encoded = tokenizer(list(texts), truncation=True, max_length=max_length)
    return [list(ids) for ids in encoded["input_ids"]]


def pad_right(batch: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists to the longest with ``pad_id``: (input_ids, attention_mask), both (B, T)."""
    longest = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), longest), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, :len(ids)] = 1
    return input_ids, attention_mask


def counted_targets(input_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """(B, T−1) bool: target positions 1.. whose NLL counts — non-EOS tokens plus each row's first EOS."""
    is_eos = input_ids == eos_id
    first_eos = is_eos & (is_eos.cumsum(dim=-1) == 1)
    return (~is_eos | first_eos)[:, 1:]


@torch.inference_mode()
def target_nll(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               autocast_dtype: torch.dtype | None) -> torch.Tensor:
    """(B, T−1) fp32 NLL of token t+1 given tokens ≤ t, for every position of a padded batch."""
    device = input_ids.device
    with torch.autocast(device_type=device.type, dtype=autocast_dtype or torch.float32,
                        enabled=autocast_dtype is not None):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
    # Row by row in fp32: a (64, 1024, 50257) fp32 copy would need 13 GB.
    return torch.stack([F.cross_entropy(logits[row, :-1].float(), input_ids[row, 1:], reduction="none")
                        for row in range(input_ids.shape[0])])


def gen_ppl(texts: Sequence[str], model, tokenizer, batch_size: int = 64,
            device: str | torch.device | None = None, dtype: torch.dtype | None = None,
            max_length: int = GPT2_CONTEXT, progress: bool = True) -> dict:
    """Corpus generative perplexity of ``texts`` (protocol in the module docstring).

    ``device`` defaults to the model's; ``dtype`` is the autocast dtype, by default bf16 on CUDA and
    none (fp32) elsewhere. Returns ``gen_ppl`` (nan if nothing was scored), ``n_empty``,
    ``n_scored_tokens``, ``nll_sum``, ``n_samples`` (texts scored, empty ones excluded) and
    ``per_sample``: each text's own perplexity over the targets counted for it in its batch (the
    released scorer's first padding EOS included), None for an empty text."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the scorer's tokenizer has no EOS token")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # as the released scorer does (spec §6)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    if dtype is None and device.type == "cuda":
        dtype = torch.bfloat16
    if dtype == torch.float32:
        dtype = None
    eos_id = tokenizer.eos_token_id
    model.eval()
    token_lists = retokenize(texts, tokenizer, scoring_context(model, max_length))
    scored_index = [i for i, ids in enumerate(token_lists) if ids]
    scored = [token_lists[i] for i in scored_index]
    per_sample: list[float | None] = [None] * len(token_lists)
    nll_sum, n_counted = 0.0, 0
    starts = range(0, len(scored), batch_size)
    for start in tqdm(starts, desc="gen ppl", unit="batch", disable=not progress):
        input_ids, attention_mask = pad_right(scored[start:start + batch_size], eos_id)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        counted = counted_targets(input_ids, eos_id)
        nll = target_nll(model, input_ids, attention_mask, dtype)
        nll_sum += float(nll[counted].double().sum())
        n_counted += int(counted.sum())
        row_nll = (nll.double() * counted).sum(1).tolist()
        for k, (row_sum, row_count) in enumerate(zip(row_nll, counted.sum(1).tolist())):
            per_sample[scored_index[start + k]] = math.exp(row_sum / row_count)
    ppl = math.exp(nll_sum / n_counted) if n_counted else float("nan")
    return {"gen_ppl": ppl, "n_empty": len(token_lists) - len(scored),
            "n_scored_tokens": n_counted, "nll_sum": nll_sum, "n_samples": len(scored),
            "per_sample": per_sample}
