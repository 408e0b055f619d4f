"""Token ids -> fixed-length model sequences (spec §2). Pure array code; the ``elf prepare`` stage does I/O.

Text is tokenised **without** added special tokens; EOS is placed here explicitly.

- Unconditional: every document followed by EOS, all concatenated and cut into ``max_length`` rows;
  the ragged tail is dropped, unless the whole corpus is shorter than one row, which is then padded
  with the pad id (0) and ``attention_mask`` 0 (excluded from the loss).
- Conditional: one row per pair, ``[source ; target ; EOS]`` with the source truncated to
  ``max_input_length`` and the row truncated / padded to ``max_length``. Padding is **EOS** (the loss
  covers it so the model learns to stop); ``attention_mask`` is 1 on real tokens (including the
  target's first EOS), ``cond_seq_mask`` is 1 on source positions, ``source_length`` counts them.

Every function returns ``input_ids`` (N, L) int32, ``attention_mask`` (N, L) int8, ``cond_seq_mask``
(N, L) int8 and ``source_length`` (N,) int32.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from tqdm import tqdm

TOKENIZE_BATCH = 1000


def tokenize(texts: Sequence[str], tokenizer, desc: str = "tokenize") -> list[list[int]]:
    """Token ids of each text, no special tokens added."""
    ids: list[list[int]] = []
    for start in tqdm(range(0, len(texts), TOKENIZE_BATCH), desc=desc, leave=False):
        batch = list(texts[start:start + TOKENIZE_BATCH])
        ids += tokenizer(batch, add_special_tokens=False)["input_ids"]
    return ids


def _arrays(input_ids: np.ndarray, attention_mask: np.ndarray,
            cond_seq_mask: np.ndarray | None = None,
            source_length: np.ndarray | None = None) -> dict[str, np.ndarray]:
    n = input_ids.shape[0]
    return {"input_ids": input_ids.astype(np.int32),
            "attention_mask": attention_mask.astype(np.int8),
            "cond_seq_mask": (np.zeros_like(input_ids) if cond_seq_mask is None
                              else cond_seq_mask).astype(np.int8),
            "source_length": (np.zeros(n) if source_length is None else source_length).astype(np.int32)}


def pack_token_streams(docs: Sequence[Sequence[int]], eos_id: int, pad_id: int, max_length: int,
                       max_sequences: int = 0) -> dict[str, np.ndarray]:
    """Concatenate ``doc + [eos]`` for every doc and cut into rows of ``max_length`` (0 = no cap)."""
    stream: list[int] = []
    budget = max_sequences * max_length if max_sequences > 0 else None
    for doc in docs:
        stream.extend(doc)
        stream.append(eos_id)
        if budget is not None and len(stream) >= budget:
            break
    tokens = np.asarray(stream, dtype=np.int64)
    if len(tokens) < max_length:  # shorter than one row: keep it, padded and masked
        ids = np.full((1, max_length), pad_id, dtype=np.int64)
        ids[0, :len(tokens)] = tokens
        mask = np.zeros((1, max_length), dtype=np.int8)
        mask[0, :len(tokens)] = 1
        return _arrays(ids, mask)
    n_rows = len(tokens) // max_length
    if max_sequences > 0:
        n_rows = min(n_rows, max_sequences)
    ids = tokens[:n_rows * max_length].reshape(n_rows, max_length)
    return _arrays(ids, np.ones_like(ids, dtype=np.int8))


def pack_unconditional(texts: Sequence[str], tokenizer, max_length: int,
                       max_sequences: int = 0) -> dict[str, np.ndarray]:
    """Tokenise documents and pack them (``pack_token_streams``) with the tokenizer's EOS and pad."""
    return pack_token_streams(tokenize(texts, tokenizer), tokenizer.eos_token_id,
                              tokenizer.pad_token_id, max_length, max_sequences)


def pack_token_pairs(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                     eos_id: int, max_length: int, max_input_length: int) -> dict[str, np.ndarray]:
    """One ``[source[:max_input_length] ; target ; eos]`` row per pair, truncated / EOS-padded."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    n = len(sources)
    ids = np.full((n, max_length), eos_id, dtype=np.int64)
    mask = np.zeros((n, max_length), dtype=np.int8)
    cond = np.zeros((n, max_length), dtype=np.int8)
    source_length = np.zeros(n, dtype=np.int32)
    for row, (source, target) in enumerate(zip(sources, targets)):
        source = list(source[:max_input_length])
        sequence = (source + list(target) + [eos_id])[:max_length]
        ids[row, :len(sequence)] = sequence
        mask[row, :len(sequence)] = 1
        source_length[row] = min(len(source), max_length)
        cond[row, :source_length[row]] = 1
    return _arrays(ids, mask, cond, source_length)


def pack_conditional(sources: Sequence[str], targets: Sequence[str], tokenizer, max_length: int,
                     max_input_length: int) -> dict[str, np.ndarray]:
    """Tokenise source/target texts and pack them (``pack_token_pairs``) with the tokenizer's EOS."""
    return pack_token_pairs(tokenize(sources, tokenizer, "tokenize sources"),
                            tokenize(targets, tokenizer, "tokenize targets"),
                            tokenizer.eos_token_id, max_length, max_input_length)
