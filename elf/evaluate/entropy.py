"""Unigram entropy of samples (spec §6): the diversity axis of the paper's PPL–entropy plots.

Per sample, the entropy (nats) of the empirical distribution of its scorer-tokenizer (GPT-2) token ids;
reported as the mean over non-empty samples. ``elf score`` passes the ids the scorer sees (truncated
at its context, 1024 for GPT-2): unigram entropy grows with length, so real documents scored for the
"Dataset" line are cut at the same length as the samples rather than counted whole.

    from elf.evaluate.entropy import text_entropy
    text_entropy(texts, tokenizer, max_length=1024)   # {"entropy": mean nats, "n_empty", "n_samples"}
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

from elf.evaluate.genppl import retokenize


def unigram_entropy(token_ids: Sequence[int]) -> float:
    """Entropy in nats of the token-frequency distribution of one sample (0 for one distinct token)."""
    if not token_ids:
        raise ValueError("the entropy of an empty sample is undefined")
    total = len(token_ids)
    return -sum(count / total * math.log(count / total) for count in Counter(token_ids).values())


def mean_entropy(token_id_lists: Sequence[Sequence[int]]) -> dict:
    """Mean per-sample unigram entropy over the non-empty samples (nan if there are none), and
    ``per_sample``: each sample's entropy (None for an empty one)."""
    per_sample = [unigram_entropy(ids) if len(ids) else None for ids in token_id_lists]
    values = [v for v in per_sample if v is not None]
    mean = sum(values) / len(values) if values else float("nan")
    return {"entropy": mean, "n_empty": len(token_id_lists) - len(values), "n_samples": len(values),
            "per_sample": per_sample}


def text_entropy(texts: Sequence[str], tokenizer, max_length: int | None = None) -> dict:
    """``mean_entropy`` of ``texts`` retokenised with ``tokenizer``, truncated to ``max_length``
    tokens (None: whole texts)."""
    return mean_entropy(retokenize(texts, tokenizer, max_length))
