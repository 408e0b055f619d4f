"""Text to score besides samples: the text column of real data (``read_text_column``: the figures'
"Dataset" line, the scorer's corpus) and a packed dataset's rows cut as samples are
(``reference_rows``, ``reference_texts``). The samples file itself is ``elf.artifacts.records``'.

    texts, split = read_text_column("results/data/owt", ("test",), n=1000)  # real text to score
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from elf.artifacts.records import SamplesFormatError


def read_text_column(path: str | os.PathLike, splits: tuple[str, ...], n: int | None = None,
                     column: str = "text") -> tuple[list[str], str]:
    """The ``column`` of the first of ``splits`` present in a ``datasets`` folder saved with
    ``save_to_disk`` (a DatasetDict, or a single Dataset whose split is then reported as "")
    or of a JSONL file (rows with a ``text`` field; a samples file's header is skipped);
    first ``n`` rows (None: all). Returns ``(texts, split used)``."""
    path = Path(path)
    if path.is_file():
        lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        texts = [row[column] for row in map(json.loads, lines) if isinstance(row, dict) and column in row]
        return texts[:n] if n is not None else texts, ""
    import datasets  # heavy import, only needed here

    loaded = datasets.load_from_disk(str(path))
    split = ""
    if isinstance(loaded, datasets.DatasetDict):
        present = [s for s in splits if s in loaded]
        if not present:
            raise SamplesFormatError(f"{path}: none of the splits {list(splits)} found "
                                     f"(it has {list(loaded)})")
        split = present[0]
        loaded = loaded[split]
    if column not in loaded.column_names:
        raise SamplesFormatError(f"{path}: no column '{column}' (columns: {loaded.column_names})")
    if n is not None:
        loaded = loaded.select(range(min(n, len(loaded))))
    return list(loaded[column]), split


def reference_rows(path: str, split: str, n: int, eos_id: int, pad_id: int) -> tuple[list[list[int]], str]:
    """The first ``n`` rows of a packed dataset's ``input_ids``, each cut at its first EOS with the
    padding dropped: what a sample of the same row would keep (``elf.flow.samplers.postprocess``)."""
    ids, split = read_text_column(path, (split,), n, column="input_ids")
    rows = []
    for row in ids:
        row = list(row)
        kept = row[:row.index(eos_id)] if eos_id in row else row
        rows.append([i for i in kept if i != pad_id])
    return rows, split


def reference_texts(path: str | os.PathLike, split: str, n: int, tokenizer=None
                    ) -> tuple[list[str], str, list[list[int]] | None]:
    """The real texts a dataset's reference scores are computed on, the split used and (with a
    tokenizer) the token rows: with ``tokenizer``, a packed dataset's rows cut at their first EOS and
    decoded exactly as samples are (``reference_rows``); without, its text column."""
    if tokenizer is None:
        texts, split = read_text_column(path, (split,), n)
        return texts, split, None
    rows, split = reference_rows(str(path), split, n, tokenizer.eos_token_id, tokenizer.pad_token_id)
    return [tokenizer.decode(row, skip_special_tokens=True) for row in rows], split, rows
