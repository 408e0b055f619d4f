"""Generative perplexity of texts under a causal LM scorer (GPT-2 Large in the paper), spec §6.

Pure computation: the caller passes the texts, the model and its tokenizer (``elf score`` loads them,
in bf16 under the bf16 precision policy as the authors do: ``elf.precision.scorer_dtype``).

Protocol (the released scorer, spec §6 corrected, reproduced exactly):
- texts empty after ``strip()`` are dropped before scoring and counted (``n_empty``);
- all remaining texts are retokenised, truncated to ``max_length`` tokens (None: not truncated), and
  right-padded with EOS to the longest text of the **whole set**, in batches of ``batch_size`` (64),
  so the score does not depend on the batch size (the set's longest is found first, so a batch is
  padded as the released scorer pads the whole set without holding it: memory is one batch's);
- a padded set longer than the scorer's context (1024 positions for GPT-2 Large) is scored in
  context-sized chunks along the sequence, each chunk on its own (no context carried over), as the
  authors' ``Metrics`` does: a 1024-token sample retokenised by GPT-2 can be longer than GPT-2 Large's
  positions, and truncating it would drop its tail. A set within the context is one chunk: exactly the
  released scorer's computation;
- token NLLs from position 1 of each chunk on; a target position counts if its token is not EOS, or if
  it is the chunk's first EOS. For a text without an EOS of its own that first EOS is its first padding
  token: every text but the set's longest is charged one EOS prediction;
- corpus PPL = exp(Σ counted NLL / Σ counted tokens), NLLs in fp32 from the scorer's logits.
A text with no counted target (the set's longest text is one token long) has no perplexity of its own;
if no text has one the corpus value is nan (written as null). Both cases warn instead of dividing by 0.

    from elf.evaluate.genppl import gen_ppl
    result = gen_ppl(texts, model, tokenizer, batch_size=64)   # {"gen_ppl", "n_empty", ...}
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

GPT2_CONTEXT = 1024  # the released scorer truncates at 1024 tokens (spec §6)
RETOKENIZE_BATCH = 256  # texts retokenised at once when only their lengths are needed


def scoring_context(model, max_length: int = GPT2_CONTEXT) -> int:
    """Longest sequence scored: ``max_length``, or the model's context if that is smaller."""
    model_context = getattr(model.config, "n_positions", None) or \
        getattr(model.config, "max_position_embeddings", None)
    return min(max_length, model_context) if model_context else max_length


def model_context(model) -> int:
    """Positions the scorer attends over (GPT-2: ``n_positions``); GPT-2's 1024 when it says none."""
    return getattr(model.config, "n_positions", None) or \
        getattr(model.config, "max_position_embeddings", None) or GPT2_CONTEXT


def retokenize(texts: Sequence[str], tokenizer, max_length: int | None) -> list[list[int]]:
    """Token ids of each text under ``tokenizer``, truncated to ``max_length`` (None: untruncated)."""
    if not texts:
        return []
    if max_length is None:
        encoded = tokenizer(list(texts), truncation=False, verbose=False)  # no length warning
    else:
        encoded = tokenizer(list(texts), truncation=True, max_length=max_length)
    return [list(ids) for ids in encoded["input_ids"]]


def pad_right(batch: Sequence[Sequence[int]], pad_id: int, longest: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists with ``pad_id`` to ``longest`` (None: the batch's longest):
    (input_ids, attention_mask), both (B, T)."""
    longest = max(len(ids) for ids in batch) if longest is None else longest
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


def scored_texts(texts: Sequence[str]) -> list[int]:
    """Indices of the texts that are scored: those not empty after ``strip()`` (the released scorer)."""
    return [i for i, text in enumerate(texts) if text.strip()]


@torch.no_grad()  # (not inference_mode: torch_xla cannot run GPT-2 on inference tensors)
def target_nll(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T−1) fp32 NLL of token t+1 given tokens ≤ t, for every position of a padded batch; the
    forward runs in the model's own dtype (bf16 weights under the bf16 policy)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
    # Row by row in fp32: a (64, 1024, 50257) fp32 copy would need 13 GB.
    return torch.stack([F.cross_entropy(logits[row, :-1].float(), input_ids[row, 1:], reduction="none")
                        for row in range(input_ids.shape[0])])


def gen_ppl(texts: Sequence[str], model, tokenizer, batch_size: int = 64,
            device: str | torch.device | None = None, max_length: int | None = GPT2_CONTEXT,
            progress: bool = True) -> dict:
    """Corpus generative perplexity of ``texts`` (protocol in the module docstring): retokenised
    texts truncated at ``max_length`` (None: whole texts), scored in chunks of the model's context.

    ``device`` defaults to the model's. Returns ``gen_ppl`` (nan if nothing was scored), ``n_empty``,
    ``n_scored_tokens``, ``nll_sum``, ``n_samples`` (texts scored, empty ones excluded) and
    ``per_sample``: each text's own perplexity over its counted targets (its first padding EOS
    included), None for an empty text or one without a counted target; ``per_sample_nll`` and
    ``per_sample_tokens``: each text's summed counted NLL and its number of counted targets (None
    for an empty text), what the corpus value's standard error is computed from
    (``elf.evaluate.uncertainty.ratio_ppl_se``)."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the scorer's tokenizer has no EOS token")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # as the released scorer does (spec §6)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    eos_id = tokenizer.eos_token_id
    model.eval()
    kept = scored_texts(texts)
    per_sample: list[float | None] = [None] * len(texts)
    per_nll: list[float | None] = [None] * len(texts)
    per_tokens: list[int | None] = [None] * len(texts)
    row_sums, row_counts = _score_rows(model, [texts[i] for i in kept], tokenizer, max_length, eos_id,
                                       batch_size, device, progress, model_context(model))
    for k, (row_sum, row_count) in enumerate(zip(row_sums.tolist(), row_counts.tolist())):
        per_sample[kept[k]] = math.exp(row_sum / row_count) if row_count else None
        per_nll[kept[k]], per_tokens[kept[k]] = row_sum, int(row_count)
    nll_sum, n_counted = float(row_sums.sum()), int(row_counts.sum())
    if kept and not row_counts.all():
        warnings.warn(f"Gen. PPL: {int((row_counts == 0).sum())} of {len(kept)} texts have no counted "
                      "target token (the longest text is one token long): no perplexity of their own",
                      stacklevel=2)
    if not n_counted:
        warnings.warn("Gen. PPL: no counted target token in any text; the score is nan", stacklevel=2)
    ppl = math.exp(nll_sum / n_counted) if n_counted else float("nan")
    return {"gen_ppl": ppl, "n_empty": len(texts) - len(kept), "n_scored_tokens": n_counted,
            "nll_sum": nll_sum, "n_samples": len(kept), "per_sample": per_sample,
            "per_sample_nll": per_nll, "per_sample_tokens": per_tokens}


def _score_rows(model, texts: Sequence[str], tokenizer, max_length: int | None, eos_id: int,
                batch_size: int, device, progress: bool, context: int):
    """(Σ counted NLL, number of counted targets) per text, float64 and int64 tensors (N,), as if the
    whole set were padded at once with EOS to its longest and cut into chunks of ``context``
    positions, each chunk scored on its own. Streamed (issue 27: memory independent of the number of
    texts): one pass retokenises the texts for their lengths only; the second retokenises
    ``batch_size`` texts at a time, pads them to the set's longest and scores each chunk for the rows
    that have a token of their own in it (a chunk of padding alone counts no target: its first EOS
    is its position 0). Within the context this is the released scorer's batching exactly."""
    n = len(texts)
    row_sums, row_counts = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.long)
    if not texts:
        return row_sums, row_counts
    longest = max(len(ids) for start in range(0, n, RETOKENIZE_BATCH)
                  for ids in retokenize(texts[start:start + RETOKENIZE_BATCH], tokenizer, max_length))
    for start in tqdm(range(0, n, batch_size), desc="gen ppl", unit="batch", disable=not progress):
        token_lists = retokenize(texts[start:start + batch_size], tokenizer, max_length)
        input_ids, attention_mask = pad_right(token_lists, eos_id, longest)
        for begin in range(0, longest, context):
            ids, mask = input_ids[:, begin:begin + context], attention_mask[:, begin:begin + context]
            counted = counted_targets(ids, eos_id)                           # (B, chunk − 1)
            if not counted.shape[1]:
                continue  # a one-position chunk has no target
            rows = torch.nonzero(mask.any(1) if begin else torch.ones(len(ids), dtype=torch.bool)).flatten()
            if len(rows):
                nll = target_nll(model, ids[rows].to(device), mask[rows].to(device)).cpu().double()
                # where, not a product: a masked position's NLL may be inf (XLA: no f64 on TPU)
                row_sums[start + rows] += torch.where(counted[rows], nll, torch.zeros_like(nll)).sum(1)
            row_counts[start:start + len(ids)] += counted.sum(1)
    return row_sums, row_counts
