"""The samples file: one JSONL file per (run, sampler, seed), written by ``elf sample``, read by
``elf score``; also reading the text column of real data (``read_text_column``).

Line 1 is ``{"provenance": {...}}`` (checkpoint, checkpoint_sha256, run, sampler, sampler_settings, seed,
code_version, ...); every further line is one sample ``{"i": int, "text": str, "token_ids": [int, ...]}``,
plus ``"source"`` and ``"reference"`` for conditional tasks. A sample's ``text`` may be "".

    provenance, rows = read_samples("results/samples/owt-b/ode64/seed0.jsonl")
    write_samples(path, provenance, rows)      # atomic: a failure leaves no file behind
    texts, split = read_text_column("results/data/owt", ("test",), n=1000)  # real text to score
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from elf.io import atomic_path


class SamplesFormatError(ValueError):
    """A samples file does not follow the format above (names the file and line)."""


def write_samples(path: str | os.PathLike, provenance: dict, rows: list[dict]) -> None:
    """Write the provenance header and one JSON line per sample, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"provenance": provenance}, ensure_ascii=False) + "\n")
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_samples(path: str | os.PathLike) -> tuple[dict, list[dict]]:
    """Return ``(provenance, rows)``; raise ``SamplesFormatError`` on a malformed file."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line for line in fh.read().split("\n") if line.strip()]
    except UnicodeDecodeError as err:
        raise SamplesFormatError(f"{path}: not UTF-8 text (byte {err.start})") from err
    if not lines:
        raise SamplesFormatError(f"{path}: empty file; expected a provenance header line")
    header = _parse_line(path, 1, lines[0])
    if set(header) != {"provenance"} or not isinstance(header["provenance"], dict):
        raise SamplesFormatError(f"{path}:1: expected {{\"provenance\": {{...}}}} as the first line")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        row = _parse_line(path, lineno, line)
        if not isinstance(row.get("text"), str):
            raise SamplesFormatError(f"{path}:{lineno}: a sample needs a string field 'text'")
        rows.append(row)
    expected = header["provenance"].get("n")
    if isinstance(expected, int) and expected != len(rows):
        raise SamplesFormatError(f"{path}: its header says n={expected}, the file holds {len(rows)} "
                                 "samples (cut or edited)")
    return header["provenance"], rows


def _parse_line(path: Path, lineno: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise SamplesFormatError(f"{path}:{lineno}: not JSON ({err})") from err
    if not isinstance(obj, dict):
        raise SamplesFormatError(f"{path}:{lineno}: expected a JSON object")
    return obj


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


def reference_texts(path: str, split: str, n: int, tokenizer=None):
    """Real text to score as a reference line: ``(texts, split, rows)``. With the dataset's
    ``tokenizer``, its packed rows cut like samples (``reference_rows``) and decoded, and ``rows`` the
    token ids; without, the ``text`` column and ``rows`` None."""
    if tokenizer is None:
        texts, split = read_text_column(path, (split,), n)
        return texts, split, None
    rows, split = reference_rows(path, split, n, tokenizer.eos_token_id, tokenizer.pad_token_id)
    return [tokenizer.decode(row, skip_special_tokens=True) for row in rows], split, rows


def texts_sha256(texts: list[str]) -> str:
    """sha256 of a list of texts (each UTF-8 encoded and NUL-terminated): names scored real text."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()
