"""Reading and verifying what one stage hands another.

Each reader verifies what its input's provenance already records and refuses a mismatch with one
line naming the file and both values (``ArtifactError``, an ``ElfError``: exit status 2):
- checkpoint and decoder weights (``*.safetensors``) against ``checksums.json``, which the writer puts
  beside them (``write_checksums``): the size, then the full sha256. Full, because sampling and
  distillation record that digest in their provenance anyway and ``file_sha256`` computes it once per
  process (~1 GB/s: ELF-L's 2.6 GB in a few seconds, next to minutes of sampling);
- safetensors and JSON files: a truncated, empty or non-UTF-8 file is a one-line message;
- embedding stores (``elf.embed.store.open_store``): completion marker, statistics and checksum
  present; each array's chunk or shard files as many and as large as finalize counted them (attribute
  ``data_files``) — one ``stat`` per file, cheap at any size, catching a deleted or truncated chunk
  that zarr would read as fill value 0 — and the token-id checksum recomputed where the token ids take at most
  ``TOKEN_HASH_LIMIT`` bytes (1 GiB: every CI, embedded and evaluation store; a paper-scale train
  split relies on the file counts);
- tokenizers: the sha256 of ``tokenizer.json`` (or the Hub reference) against what a store or a
  checkpoint recorded;
- samples headers: the task, run, sampler and seed a samples file claims, and its checkpoint digest
  against the checkpoint's ``checksums.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from elf.artifacts.layout import SEED_FILE
from elf.artifacts.names import (CHECKSUMS, EMA_WEIGHTS, HEADER_CHECKPOINT, HEADER_CHECKPOINT_SHA256,
                                 PROVENANCE_FILE, STORE_FILES, STORE_STATS, STORE_TOKEN_IDS_SHA256,
                                 TOKENIZER_FILE, TOKENIZER_SHA256)
from elf.errors import ElfError

TOKEN_HASH_LIMIT = 1 << 30
_DIGESTS: dict[tuple, str] = {}


class ArtifactError(ElfError):
    """An input artifact that is missing, unreadable, damaged, or not the one its provenance names."""


class MissingArtifactError(ArtifactError, FileNotFoundError):
    """An input artifact that is not there (also a ``FileNotFoundError``)."""


def mismatch(what: str, found: Any, recorded: Any, remedy: str) -> ArtifactError:
    """The one-line refusal of a value that differs from the recorded one."""
    return ArtifactError(f"{what}: found {found}, but {recorded} is recorded; {remedy}")


def short(digest: str | None) -> str:
    return f"sha256 {digest[:16]}…" if digest else "no sha256"


# --------------------------------------------------------------------------------------------------
# Files: JSON, digests, safetensors
# --------------------------------------------------------------------------------------------------

def read_json(path: str | os.PathLike, what: str = "JSON file", *, finite: bool = False) -> Any:
    """A JSON file; missing, non-UTF-8 or malformed (with ``finite``: NaN / Infinity too) is an
    ``ArtifactError`` naming the file."""
    path = Path(path)

    def refuse_constant(name: str):
        raise ValueError(f"non-finite number {name}")

    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text, **({"parse_constant": refuse_constant} if finite else {}))
    except FileNotFoundError as err:
        raise MissingArtifactError(f"{what} {path} not found") from err
    except UnicodeDecodeError as err:
        raise ArtifactError(f"{what} {path}: not UTF-8 text (byte {err.start})") from err
    except ValueError as err:  # JSONDecodeError, or a non-finite constant
        raise ArtifactError(f"{what} {path}: not valid JSON ({err})") from err
    except OSError as err:
        raise ArtifactError(f"{what} {path}: cannot read ({err.strerror or err})") from err


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, computed once per process for an unchanged file (size and mtime)."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(chunk):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def write_checksums(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """``checksums.json`` beside the files ``names`` of ``folder``: their size and sha256."""
    from elf.io import write_json

    folder = Path(folder)
    write_json(folder / CHECKSUMS, {name: {"bytes": (folder / name).stat().st_size,
                                           "sha256": file_sha256(folder / name)} for name in names})


def verified_sha256(path: str | os.PathLike, remedy: str = "rerun the rule that wrote it") -> str:
    """The sha256 of ``path`` after checking it against its folder's ``checksums.json``."""
    path = Path(path)
    if not path.is_file():
        raise MissingArtifactError(f"{path} not found; {remedy}")
    record_path = path.parent / CHECKSUMS
    if not record_path.is_file():
        raise ArtifactError(f"{path}: no {CHECKSUMS} beside it to verify it against (written by an "
                            f"older elf, or the write was interrupted); {remedy}")
    recorded = read_json(record_path, "checksums").get(path.name)
    if not isinstance(recorded, dict):
        raise ArtifactError(f"{path}: not listed in {record_path}; {remedy}")
    size = path.stat().st_size
    if size != recorded.get("bytes"):
        raise mismatch(str(path), f"{size} bytes", f"{recorded.get('bytes')} bytes in {record_path}",
                       f"the file is damaged or was replaced; {remedy}")
    digest = file_sha256(path)
    if digest != recorded.get("sha256"):
        raise mismatch(str(path), short(digest), f"{short(recorded.get('sha256'))} in {record_path}",
                       f"the file is damaged or was replaced; {remedy}")
    return digest


def load_safetensors(path: str | os.PathLike) -> dict:
    """The tensors of a safetensors file; a truncated or malformed file is an ``ArtifactError``."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except FileNotFoundError as err:
        raise MissingArtifactError(f"{path} not found") from err
    except Exception as err:  # SafetensorError (a Rust error type), OSError, ...
        raise ArtifactError(f"{path}: not a readable safetensors file "
                            f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from err


# --------------------------------------------------------------------------------------------------
# Embedding stores
# --------------------------------------------------------------------------------------------------

def store_files(root: str | os.PathLike) -> dict[str, list[int]]:
    """Per array of a store: how many data files (chunks or shards; metadata aside) and their bytes."""
    root = Path(root)
    files: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != "zarr.json" and path.parent != root:
            entry = files.setdefault(path.relative_to(root).parts[0], [0, 0])
            entry[0] += 1
            entry[1] += path.stat().st_size
    return files


def store_problems(root: str | os.PathLike, attrs: dict) -> list[ArtifactError]:
    """Every problem of a store marked complete: statistics, checksum, and each array's data files as
    finalize counted them (``elf audit`` reports them all; a stage refuses the first)."""
    root = Path(root)
    again = f"re-embed it (delete {root} and rerun its embed rule)"
    problems = []
    missing = [k for k in (STORE_STATS, STORE_TOKEN_IDS_SHA256) if k not in attrs]
    if missing:
        problems.append(ArtifactError(f"embedding store {root} is marked complete but lacks "
                                      f"{', '.join(missing)}; {again}"))
    recorded = attrs.get(STORE_FILES)
    if not isinstance(recorded, dict):
        return problems + [ArtifactError(
            f"embedding store {root} has no '{STORE_FILES}' record to verify its chunk files against "
            f"(finalized by an older elf); `elf embed --finalize --out {root}` records them as they "
            f"are now, or {again}")]
    found = store_files(root)
    for array, (count, size) in recorded.items():
        if found.get(array) != [count, size]:
            have = found.get(array, [0, 0])
            problems.append(mismatch(f"embedding store {root}: array {array}",
                                     f"{have[0]} data files of {have[1]} bytes",
                                     f"{count} files of {size} bytes at finalize",
                                     f"a chunk file is missing or truncated (zarr would read zeros); "
                                     f"{again}"))
    return problems


def check_store(root: str | os.PathLike, attrs: dict) -> None:
    """A complete store, verified: its first problem (``store_problems``) raised."""
    if problems := store_problems(root, attrs):
        raise problems[0]


# --------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------

def tokenizer_sha256(ref: str | os.PathLike | None) -> str | None:
    """sha256 of a local tokenizer folder's ``tokenizer.json`` (None for a Hub reference)."""
    path = Path(str(ref)) / TOKENIZER_FILE if ref is not None else None
    return file_sha256(path) if path is not None and path.is_file() else None


def tokens_tokenizer(tokens_dir: str | os.PathLike) -> dict:
    """The tokenizer a packed-token folder was made with (its ``provenance.json``)."""
    record = Path(tokens_dir) / PROVENANCE_FILE
    recorded = read_json(record, "token provenance") if record.is_file() else {}
    return {"name_or_path": recorded.get("tokenizer"), TOKENIZER_SHA256: recorded.get(TOKENIZER_SHA256)}


def check_tokenizer(ref: str, recorded: dict | None, recorded_by: str) -> None:
    """Refuse a tokenizer other than the one ``recorded_by`` (a store, a checkpoint) was made with:
    by ``tokenizer.json`` hash where one was recorded, else by Hub reference. A local tokenizer
    recorded without a hash (made before hashes were recorded) cannot be checked."""
    from elf.hub import split_ref

    recorded = recorded or {}
    theirs, name = recorded.get(TOKENIZER_SHA256), recorded.get("name_or_path")
    given = tokenizer_sha256(ref)
    if theirs:
        ok = given == theirs
    elif name and (given is None or not Path(str(name)).exists()):
        ok = given is None and split_ref(ref) == split_ref(str(name))
    else:
        return
    if not ok:
        found = short(given) if given else f"the Hub tokenizer '{ref}'"
        raise mismatch(f"--tokenizer {ref}", found,
                       f"tokenizer '{name}'" + (f" ({short(theirs)})" if theirs else "")
                       + f" for {recorded_by}", "pass the tokenizer it was made with")


# --------------------------------------------------------------------------------------------------
# Samples headers
# --------------------------------------------------------------------------------------------------

def check_samples_header(path: str | os.PathLike, header: dict, *, task: str | None = None,
                         run: str | None = None, sampler: str | None = None) -> None:
    """A samples file is what it claims: the seed its name says, the task / run / sampler asked for,
    and drawn from the checkpoint that is now at its recorded path (when that is still there)."""
    path = Path(path)
    named = SEED_FILE.match(path.stem)
    claims = [("seed", int(named.group(1)) if named else None, f"its file name {path.name}"),
              ("task", task, "--task"), ("run", run, "--run"), ("sampler", sampler, "--sampler")]
    for key, expected, source in claims:
        if expected is not None and header.get(key) is not None and header[key] != expected:
            raise mismatch(f"samples {path}", f"{key} {header[key]!r} in its header",
                           f"{key} {expected!r} by {source}", "score the samples of that "
                           f"{key}, or resample")
    checkpoint, drawn = header.get(HEADER_CHECKPOINT), header.get(HEADER_CHECKPOINT_SHA256)
    record = Path(str(checkpoint)) / CHECKSUMS
    if checkpoint and drawn and record.is_file():
        now = read_json(record, "checksums").get(EMA_WEIGHTS, {}).get("sha256")
        if now and now != drawn:
            raise mismatch(f"samples {path}", f"checkpoint {short(drawn)} in its header",
                           f"{short(now)} for {checkpoint}/{EMA_WEIGHTS} in {record}",
                           "the checkpoint changed since sampling: resample")


# --------------------------------------------------------------------------------------------------
# Inputs that must agree where they meet (issue 26)
# --------------------------------------------------------------------------------------------------

def check_store_for_run(path: str, *, conditional: bool, seq_len: int, identity: dict, dataset: dict,
                        embedding: dict) -> None:
    """A train store made of the run's dataset with the run's embedding: the task's layout (a
    conditional store holds source-dropped rows), the sequence length, and the embedding settings
    the store recorded (kind, encoder, dtype)."""
    remedy = "pass the train store of the run's dataset and embedding"
    if conditional != (dataset.get("task") != "unconditional"):
        layout = "conditional" if conditional else "unconditional"
        raise mismatch(f"--store {path}", f"{layout} rows", f"task {dataset.get('task')!r} for the "
                       f"run's dataset {dataset.get('name')!r} (--settings)", remedy)
    if seq_len != dataset.get("max_length"):
        raise mismatch(f"--store {path}", f"sequences of {seq_len} tokens",
                       f"max_length {dataset.get('max_length')} for the run's dataset "
                       f"{dataset.get('name')!r} (--settings)", remedy)
    recorded = identity.get("settings") or {}
    differ = sorted(k for k, v in recorded.items() if k in embedding and embedding[k] != v)
    if differ:
        key = differ[0]
        raise mismatch(f"--store {path}", f"embedding {key} {recorded[key]!r}",
                       f"{key} {embedding[key]!r} for the run's embedding (--settings)", remedy)


def check_same_dataset(option: str, meta: dict, dataset: dict, ignore: Iterable[str] = ()) -> None:
    """A checkpoint another run builds on (a distillation teacher or init) was trained on that
    run's dataset (``config.json`` ``dataset``; scheduling-only fields ``ignore``-d)."""
    theirs = meta.get("dataset")
    if not isinstance(theirs, dict):
        return
    differ = sorted(k for k in set(theirs) & set(dataset)  # the fields both record
                    if k not in ignore and theirs[k] != dataset[k])
    if differ:
        raise mismatch(f"{option}: its dataset", f"{theirs.get('name')!r} (task {theirs.get('task')!r}, "
                       f"{differ[0]} {theirs.get(differ[0])!r})",
                       f"{dataset.get('name')!r} (task {dataset.get('task')!r}, {differ[0]} "
                       f"{dataset.get(differ[0])!r}) for this run (--settings)",
                       "a student learns its teacher's flow on the same dataset: pass a checkpoint "
                       "of it")


def check_metric_range(path: str, metrics: dict) -> None:
    """Score values inside their range: a perplexity >= 1, an entropy >= 0, BLEU / ROUGE in [0, 100]
    (a value outside is damage or a wiring mistake, never a mean)."""
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        lo, hi = _metric_range(name)
        if value < lo or (hi is not None and value > hi):
            allowed = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ArtifactError(f"score file {path}: metric {name} is {value}; allowed: {allowed} "
                                "(damaged or not an `elf score` output: rescore)")


def _metric_range(name: str) -> tuple[float, float | None]:
    if name.endswith("_se"):
        return 0.0, None  # a standard error (of a perplexity too) is any non-negative number
    if "ppl" in name:
        return 1.0, None
    if name.startswith(("bleu", "rouge")):
        return 0.0, 100.0
    return 0.0, None  # entropies, repetition rates, counts, standard errors: never negative
