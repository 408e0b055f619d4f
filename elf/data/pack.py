"""Token ids -> fixed-length model sequences (spec §2). Pure array code; the ``elf prepare`` stage does I/O.

Text is tokenised **without** added special tokens; EOS is placed here explicitly.

- Unconditional: every document followed by EOS, all concatenated and cut into ``max_length`` rows;
  the ragged tail is dropped, unless the whole corpus is shorter than one row, which is then padded
  with the pad id (0) and ``attention_mask`` 0 (excluded from the loss).
- Conditional: one row per pair, ``[source ; target ; EOS]`` with the source truncated to
  ``max_input_length`` and the row truncated / padded to ``max_length``. Padding is **EOS** (the loss
  covers it so the model learns to stop); ``attention_mask`` is 1 on real tokens (including the
  target's first EOS), ``cond_seq_mask`` is 1 on source positions, ``source_length`` counts them.

The authors' tokenised sets (``source: authors``) are laid out as their collate does instead, one
row per record: unconditional ids truncated to ``max_length`` and padded with the pad id, padding
masked out of the loss (``pad_token_rows``); conditional ``[source[:max_input_length] ; target]``
truncated / EOS-padded with no EOS appended, ``attention_mask`` 1 on source and target ids only
(``pack_token_pairs(..., append_eos=False)``; the loss still covers the EOS padding).

``StreamPacker`` is the unconditional packer fed a batch of documents at a time (memory: one batch);
``pack_token_streams`` is one call of it. ``elf prepare`` runs one per shard of a big split, so each
shard's stream is cut on its own (see elf/stages/prepare.py).

Every function returns ``input_ids`` (N, L) int32, ``attention_mask`` (N, L) int8, ``cond_seq_mask``
(N, L) int8 and ``source_length`` (N,) int32.
"""

from __future__ import annotations

from itertools import chain
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


class StreamPacker:
    """``pack_token_streams`` fed a batch of documents at a time: memory stays at one batch.

    ``add(docs)`` returns the full rows these documents complete (int64, (n, L)); ``finish()`` the
    padded row of a corpus shorter than one row (else nothing) and ``tail_tokens``, the ragged tail
    dropped. ``done`` turns true once ``max_sequences`` rows are out (0 = no cap).
    """

    def __init__(self, eos_id: int, pad_id: int, max_length: int, max_sequences: int = 0):
        self.eos_id, self.pad_id, self.max_length = eos_id, pad_id, max_length
        self.max_sequences = max_sequences
        self.rows_out = 0
        self.tail_tokens = 0
        self._carry = np.zeros(0, dtype=np.int64)

    @property
    def done(self) -> bool:
        return 0 < self.max_sequences <= self.rows_out

    def add(self, docs: Sequence[Sequence[int]]) -> np.ndarray:
        if self.done or not len(docs):
            return np.zeros((0, self.max_length), dtype=np.int64)
        total = sum(len(doc) + 1 for doc in docs)
        flat = np.fromiter(chain.from_iterable(chain(doc, (self.eos_id,)) for doc in docs),
                           dtype=np.int64, count=total)
        stream = np.concatenate([self._carry, flat])
        n_rows = len(stream) // self.max_length
        if self.max_sequences > 0:
            n_rows = min(n_rows, self.max_sequences - self.rows_out)
        cut = n_rows * self.max_length
        self._carry = stream[cut:]
        self.rows_out += n_rows
        return stream[:cut].reshape(n_rows, self.max_length)

    def finish(self) -> dict[str, np.ndarray]:
        """The last rows as arrays: one padded, masked row if no row was full, else none."""
        carry, self._carry = self._carry, np.zeros(0, dtype=np.int64)
        if self.rows_out == 0:  # shorter than one row: keep it, padded and masked
            ids = np.full((1, self.max_length), self.pad_id, dtype=np.int64)
            ids[0, :len(carry)] = carry
            mask = np.zeros((1, self.max_length), dtype=np.int8)
            mask[0, :len(carry)] = 1
            self.rows_out = 1
            return _arrays(ids, mask)
        if not self.done:
            self.tail_tokens = len(carry)
        return rows_arrays(np.zeros((0, self.max_length), dtype=np.int64))


def rows_arrays(rows: np.ndarray) -> dict[str, np.ndarray]:
    """Full unconditional rows (n, L) as the packed arrays (every token real, no source)."""
    return _arrays(rows, np.ones_like(rows, dtype=np.int8))


def pack_token_streams(docs: Sequence[Sequence[int]], eos_id: int, pad_id: int, max_length: int,
                       max_sequences: int = 0) -> dict[str, np.ndarray]:
    """Concatenate ``doc + [eos]`` for every doc and cut into rows of ``max_length`` (0 = no cap)."""
    packer = StreamPacker(eos_id, pad_id, max_length, max_sequences)
    full = rows_arrays(packer.add(docs))
    last = packer.finish()
    return {name: np.concatenate([full[name], last[name]]) for name in full}


def pack_unconditional(texts: Sequence[str], tokenizer, max_length: int,
                       max_sequences: int = 0) -> dict[str, np.ndarray]:
    """Tokenise documents and pack them (``pack_token_streams``) with the tokenizer's EOS and pad."""
    return pack_token_streams(tokenize(texts, tokenizer), tokenizer.eos_token_id,
                              tokenizer.pad_token_id, max_length, max_sequences)


def pad_token_rows(rows: Sequence[Sequence[int]], pad_id: int, max_length: int) -> dict[str, np.ndarray]:
    """One row per record of ids, truncated to ``max_length`` and padded with ``pad_id``;
    ``attention_mask`` 1 on the ids (the authors' unconditional collate)."""
    ids = np.full((len(rows), max_length), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), max_length), dtype=np.int8)
    for index, row in enumerate(rows):
        kept = list(row[:max_length])
        ids[index, :len(kept)] = kept
        mask[index, :len(kept)] = 1
    return _arrays(ids, mask)


def pack_token_pairs(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                     eos_id: int, max_length: int, max_input_length: int,
                     append_eos: bool = True, source_pad_id: int | None = None) -> dict[str, np.ndarray]:
    """One ``[source[:max_input_length] ; target ; eos]`` row per pair, truncated / EOS-padded
    (``append_eos`` False: no EOS after the target, as the authors' collate).

    ``source_pad_id`` given: every source is padded with it to ``max_input_length`` (attention_mask
    0 there, cond_seq_mask 1, ``source_length`` = ``max_input_length``), so every target starts at
    the same position — a fixed offset between a target token and the source it reads (the
    embedded config's choice for its small networks; the paper's layout is the default)."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    n = len(sources)
    ids = np.full((n, max_length), eos_id, dtype=np.int64)
    mask = np.zeros((n, max_length), dtype=np.int8)
    cond = np.zeros((n, max_length), dtype=np.int8)
    source_length = np.zeros(n, dtype=np.int32)
    for row, (source, target) in enumerate(zip(sources, targets)):
        source = list(source[:max_input_length])
        if source_pad_id is None:
            sequence = (source + list(target) + [eos_id] * append_eos)[:max_length]
            ids[row, :len(sequence)] = sequence
            mask[row, :len(sequence)] = 1
            source_length[row] = min(len(source), max_length)
        else:
            width = min(max_input_length, max_length)
            sequence = (list(target) + [eos_id] * append_eos)[:max_length - width]
            ids[row, :width] = source_pad_id
            ids[row, :len(source)] = source
            mask[row, :len(source)] = 1
            ids[row, width:width + len(sequence)] = sequence
            mask[row, width:width + len(sequence)] = 1
            source_length[row] = width
        cond[row, :source_length[row]] = 1
    return _arrays(ids, mask, cond, source_length)


def pack_conditional(sources: Sequence[str], targets: Sequence[str], tokenizer, max_length: int,
                     max_input_length: int, pad_source: bool = False) -> dict[str, np.ndarray]:
    """Tokenise source/target texts and pack them (``pack_token_pairs``) with the tokenizer's EOS
    (``pad_source``: sources padded to ``max_input_length`` with its pad id)."""
    return pack_token_pairs(tokenize(sources, tokenizer, "tokenize sources"),
                            tokenize(targets, tokenizer, "tokenize targets"),
                            tokenizer.eos_token_id, max_length, max_input_length,
                            source_pad_id=tokenizer.pad_token_id if pad_source else None)
