"""Calibration texts for Gen. PPL: the corpus's own tokens without their order.

- ``shuffled``: each held-out row's token ids (the ELF tokenizer's) in a random order;
- ``unigram``: i.i.d. token ids from the unigram distribution of the given rows, each new row as long
  as the row it replaces.
Both keep the vocabulary and the lengths of real text. A model whose samples score between these lines
and the real text's has learned word order; one at their level has learned word statistics only.
Every draw comes from the caller's generator.
"""

from __future__ import annotations

from typing import Sequence

import torch

CORRUPTIONS = ("shuffled", "unigram")


def shuffled_rows(rows: Sequence[Sequence[int]], generator: torch.Generator) -> list[list[int]]:
    """Each row's ids in a random order (one permutation per row)."""
    return [[row[i] for i in torch.randperm(len(row), generator=generator).tolist()] for row in rows]


def unigram_rows(rows: Sequence[Sequence[int]], generator: torch.Generator) -> list[list[int]]:
    """Rows of the same lengths, every id drawn independently from the rows' unigram distribution."""
    flat = torch.tensor([i for row in rows for i in row], dtype=torch.long)
    if not len(flat):
        return [[] for _ in rows]
    counts = torch.bincount(flat).double()
    total = sum(len(r) for r in rows)
    draws = torch.multinomial(counts / counts.sum(), total, replacement=True, generator=generator)
    out, start = [], 0
    for row in rows:
        out.append(draws[start:start + len(row)].tolist())
        start += len(row)
    return out


def corrupt_rows(rows: Sequence[Sequence[int]], how: str, seed: int) -> list[list[int]]:
    """``rows`` of token ids corrupted as ``how`` names (``CORRUPTIONS``), from a generator seeded
    with ``seed``."""
    if how not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {how!r}; expected one of {', '.join(CORRUPTIONS)}")
    generator = torch.Generator().manual_seed(seed)
    return shuffled_rows(rows, generator) if how == "shuffled" else unigram_rows(rows, generator)


def corrupt_texts(texts: Sequence[str], tokenizer, how: str, seed: int) -> list[str]:
    """``texts`` tokenised (no special tokens), corrupted (``corrupt_rows``) and decoded."""
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts] if texts else []
    return [tokenizer.decode(r, skip_special_tokens=True) for r in corrupt_rows(rows, how, seed)]
