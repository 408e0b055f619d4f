"""Repetition of a sample: the share of its words taken by its most frequent word.

A collapsed model repeats one word ("the fox the fox the the ..."), which can score a low Gen. PPL
under a small scorer while reading as nothing; held-out text is the yardstick (the Dataset line of
``benchmarks/embedded_bar.py`` prints its share beside the samples'). Words are lower-cased runs of letters and apostrophes, so punctuation never counts.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

WORD = re.compile(r"[a-z']+")


def top_word_share(text: str) -> float | None:
    """Count of the most frequent word over the number of words (None for a text without words)."""
    words = WORD.findall(text.lower())
    if not words:
        return None
    return Counter(words).most_common(1)[0][1] / len(words)


def repetition(texts: Sequence[str]) -> dict:
    """Mean ``top_word_share`` over the texts that have words (nan if none), with ``n_empty``."""
    shares = [s for s in (top_word_share(t) for t in texts) if s is not None]
    mean = sum(shares) / len(shares) if shares else float("nan")
    return {"repetition": mean, "n_empty": len(texts) - len(shares)}
