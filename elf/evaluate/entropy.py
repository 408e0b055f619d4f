"""Unigram entropy of samples (spec §6): the diversity axis of the paper's PPL–entropy plots.

Per sample, the entropy (nats) of the empirical distribution of its scorer-tokenizer (GPT-2) token ids;
reported as the mean over the samples scored: as for Gen. PPL, samples whose text is empty after
``strip()`` are dropped (the released scorer), so a whitespace-only sample does not count as entropy 0. ``elf score`` passes the ids the scorer sees (truncated
at its context, 1024 for GPT-2): unigram entropy grows with length, so real documents scored for the
"Dataset" line are cut at the same length as the samples rather than counted whole.

    from elf.evaluate.entropy import text_entropy
    text_entropy(texts, tokenizer, max_length=1024)   # {"entropy": mean nats, "n_empty", "n_samples"}
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

from elf.evaluate.genppl import RETOKENIZE_BATCH, retokenize, scored_texts


def unigram_entropy(token_ids: Sequence[int]) -> float:
    """Entropy in nats of the token-frequency distribution of one sample (0 for one distinct token)."""
    if not token_ids:
        raise ValueError("the entropy of an empty sample is undefined")
    total = len(token_ids)
    return -sum(count / total * math.log(count / total) for count in Counter(token_ids).values())


def mean_entropy(token_id_lists: Sequence[Sequence[int]]) -> dict:
    """Mean per-sample unigram entropy over the non-empty samples (nan if there are none), and
    ``per_sample``: each sample's entropy (None for an empty one)."""
    return _summary([unigram_entropy(ids) if len(ids) else None for ids in token_id_lists])


def _summary(per_sample: list[float | None]) -> dict:
    values = [v for v in per_sample if v is not None]
    mean = sum(values) / len(values) if values else float("nan")
    return {"entropy": mean, "n_empty": len(per_sample) - len(values), "n_samples": len(values),
            "per_sample": per_sample}


def text_entropy(texts: Sequence[str], tokenizer, max_length: int | None = None) -> dict:
    """``mean_entropy`` of ``texts`` retokenised with ``tokenizer``, truncated to ``max_length``
    tokens (None: whole texts); texts empty after ``strip()`` are dropped (``n_empty``, per-sample
    None). Retokenised a batch at a time: only the entropies are kept."""
    kept = scored_texts(texts)
    per_sample: list[float | None] = [None] * len(texts)
    for start in range(0, len(kept), RETOKENIZE_BATCH):
        batch = kept[start:start + RETOKENIZE_BATCH]
        for i, ids in zip(batch, retokenize([texts[i] for i in batch], tokenizer, max_length)):
            per_sample[i] = unigram_entropy(ids) if ids else None
    return _summary(per_sample)
