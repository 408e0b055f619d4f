"""The records one stage writes and another reads, built and parsed in one place: the samples file,
a distillation round's ``tokens.json``, and the fingerprints that identify a folder (a scorer, a
tokenizer's corpora) or a list of texts.

The samples file (``elf sample`` writes; ``elf score``, the report's F8 and the audit read): line 1
is ``{"provenance": {...}}`` (the header: checkpoint, checkpoint_sha256, run, sampler,
sampler_settings, seed, code_version, ...); every further line is one sample ``{"i": int, "text":
str, "token_ids": [int, ...]}``, plus ``"source"`` and ``"reference"`` for conditional tasks. A
sample's ``text`` may be ""; its ``token_ids`` are at most the header's ``max_tokens`` (the sequence
length, or a conditional layout's target tokens).

    header, rows = read_samples("results/evals/base/all/samples/ode64/seed0.jsonl")
    write_samples(path, header, rows)      # atomic: a failure leaves no file behind
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from elf.artifacts.names import (HEADER_CHECKPOINT, HEADER_CHECKPOINT_SHA256, HEADER_DECODER_SHA256,
                                 HEADER_RUN_CONFIG_SHA256, HEADER_SAMPLE_INPUTS, HEADER_STORE_IDENTITY,
                                 PROVENANCE, PROVENANCE_FILE, SCORER_CONFIG_SHA256, SCORER_SHA256,
                                 TOKENS_ROUNDS, TOKENS_TEACHER_SEEN)
from elf.io import atomic_path, sha256_json
from elf.artifacts.checks import file_sha256


# --------------------------------------------------------------------------------------------------
# Samples files
# --------------------------------------------------------------------------------------------------

class SamplesFormatError(ValueError):
    """A samples file does not follow the format above (names the file and line)."""


def samples_line(obj: dict) -> str:
    """One line of a samples file (the header or a sample), newline included."""
    return json.dumps(obj, ensure_ascii=False) + "\n"


def header_line(header: dict) -> str:
    return samples_line({PROVENANCE: header})


def write_samples(path: str | os.PathLike, header: dict, rows: list[dict]) -> None:
    """Write the provenance header and one JSON line per sample, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(header_line(header))
            for row in rows:
                fh.write(samples_line(row))


def read_samples(path: str | os.PathLike, fields: tuple[str, ...] | None = None) -> tuple[dict, list[dict]]:
    """Return ``(header, rows)``; raise ``SamplesFormatError`` on a malformed file. Every row is
    checked; with ``fields`` each row keeps only those keys (``elf score`` keeps no ``token_ids``:
    as Python ints they are most of a row's memory). Read a line at a time."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = (line for line in fh if line.strip())
            first = next(lines, None)
            if first is None:
                raise SamplesFormatError(f"{path}: empty file; expected a provenance header line")
            header = _header_of(path, _parse_line(path, 1, first))
            rows = [_checked_row(path, lineno, line, header.get("max_tokens"), fields)
                    for lineno, line in enumerate(lines, start=2)]
    except UnicodeDecodeError as err:
        raise SamplesFormatError(f"{path}: not UTF-8 text (byte {err.start})") from err
    expected = header.get("n")
    if isinstance(expected, int) and expected != len(rows):
        raise SamplesFormatError(f"{path}: its header says n={expected}, the file holds {len(rows)} "
                                 "samples (cut or edited)")
    return header, rows


def _checked_row(path: Path, lineno: int, line: str, longest, fields: tuple[str, ...] | None) -> dict:
    row = _parse_line(path, lineno, line)
    if not isinstance(row.get("text"), str):
        raise SamplesFormatError(f"{path}:{lineno}: a sample needs a string field 'text'")
    ids = row.get("token_ids")
    too_long = isinstance(ids, list) and isinstance(longest, int) and len(ids) > longest
    if ids is not None and (not isinstance(ids, list) or too_long):
        found = f"{len(ids)} token ids" if isinstance(ids, list) else f"token_ids {ids!r}"
        raise SamplesFormatError(f"{path}:{lineno}: {found}, but its header says a sample keeps at "
                                 f"most max_tokens={longest} (cut or edited)")
    return row if fields is None else {key: row[key] for key in fields if key in row}


def samples_header(*, checkpoint: str, checkpoint_sha256: str, run: str, run_config_sha256: str,
                   sampler: str, sampler_settings: dict, precision: str, n: int, batch_size: int,
                   task: str, seed: int, eval_store: str | None = None, eval_tokens: str | None = None,
                   eval_split: str | None = None, eval_store_identity: str | None = None,
                   decoder: str | None = None, decoder_sha256: str | None = None,
                   max_tokens: int | None = None) -> dict:
    """The header of one seed's samples file (``elf.io.provenance`` adds the command and code
    version): what was sampled, from which checkpoint and inputs, with which settings."""
    return {HEADER_CHECKPOINT: checkpoint, HEADER_CHECKPOINT_SHA256: checkpoint_sha256, "run": run,
            HEADER_RUN_CONFIG_SHA256: run_config_sha256, "sampler": sampler,
            "sampler_settings": sampler_settings, "precision": precision, "n": n,
            "batch_size": batch_size, "task": task, "eval_store": eval_store,
            "eval_tokens": eval_tokens, "eval_split": eval_split,
            HEADER_STORE_IDENTITY: eval_store_identity, "decoder": decoder,
            HEADER_DECODER_SHA256: decoder_sha256, "seed": seed, "max_tokens": max_tokens}


def same_sample_inputs(old: dict, header: dict) -> bool:
    """Whether samples with header ``old`` are the rows ``header`` asks for (resume, reuse)."""
    return all(old.get(key) == header[key] for key in HEADER_SAMPLE_INPUTS)


def read_samples_header(path: str | os.PathLike) -> dict:
    """The header (first line) of a samples file, without reading the samples."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    return _header_of(path, _parse_line(path, 1, first))


def _header_of(path: Path, first: dict) -> dict:
    if set(first) != {PROVENANCE} or not isinstance(first[PROVENANCE], dict):
        raise SamplesFormatError(f"{path}:1: expected {{\"{PROVENANCE}\": {{...}}}} as the first line")
    return first[PROVENANCE]


def _parse_line(path: Path, lineno: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise SamplesFormatError(f"{path}:{lineno}: not JSON ({err})") from err
    if not isinstance(obj, dict):
        raise SamplesFormatError(f"{path}:{lineno}: expected a JSON object")
    return obj


# --------------------------------------------------------------------------------------------------
# Training tokens: config.json budgets and a distillation round's tokens.json
# --------------------------------------------------------------------------------------------------

def run_tokens(meta: dict) -> int | None:
    """Training tokens of a finished run from its ``config.json``: steps × batch × L (None if unknown)."""
    budget = (meta.get("run") or {}).get("budget")
    length = (meta.get("model") or {}).get("max_length")
    if not budget or not length:
        return None
    return int(budget["steps"]) * int(budget["batch_size"]) * int(length)


def token_record(run_name: str, run_settings: dict, seq_len: int, teacher_meta: dict,
                 init_record: dict | None) -> dict:
    """``tokens.json`` of a finished round. ``init_record``: the init run's ``tokens.json`` when the
    init is itself a distillation round (None when it is the teacher or another trained run)."""
    budget, distill = run_settings["budget"], run_settings["distill"]
    tokens = int(budget["steps"]) * int(budget["batch_size"]) * int(seq_len)
    before = init_record or {}
    distill_total = int(before.get("distill_tokens_total", 0)) + tokens
    teacher_tokens = run_tokens(teacher_meta)
    total = None if teacher_tokens is None else teacher_tokens + distill_total
    return {
        "run": run_name, "kind": "distill", "round": int(before.get("round", 0)) + 1,
        "student_steps": distill["student_steps"], "teacher_substeps": distill["teacher_substeps"],
        "steps": int(budget["steps"]), "batch_size": int(budget["batch_size"]), "seq_len": int(seq_len),
        "tokens_seen": tokens,
        TOKENS_ROUNDS: [*before.get(TOKENS_ROUNDS, []), {"run": run_name, "tokens_seen": tokens}],
        "distill_tokens_total": distill_total,
        "teacher": run_settings.get("teacher"), TOKENS_TEACHER_SEEN: teacher_tokens,
        "total_tokens_seen": total,
        "ratio_to_teacher": None if not teacher_tokens else total / teacher_tokens,
    }


# --------------------------------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------------------------------

def folder_sha256(folder: str | Path) -> str:
    """One hash of every file under ``folder`` (relative path -> sha256)."""
    root = Path(folder)
    return sha256_json({str(f.relative_to(root)): file_sha256(f)
                        for f in sorted(root.rglob("*")) if f.is_file()})


def scorer_fingerprint(name_or_path: str, model) -> dict:
    """How a score file names its scorer: the sha256 of a local folder's weight and tokenizer files
    (``scorer_sha256``), or for a Hub name the config hash and revision of the loaded ``model``."""
    folder = Path(name_or_path)
    if folder.is_dir():
        files = sorted(f for f in folder.iterdir() if f.is_file() and f.name != PROVENANCE_FILE)
        return {SCORER_SHA256: sha256_json({f.name: file_sha256(f) for f in files})}
    return {SCORER_CONFIG_SHA256: sha256_json(model.config.to_dict()),
            "scorer_revision": getattr(model.config, "_commit_hash", None)}


def texts_sha256(texts: list[str]) -> str:
    """sha256 of a list of texts (each UTF-8 encoded and NUL-terminated): names scored real text."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()
