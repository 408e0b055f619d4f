"""Tokenising and packing one dataset in shards (``elf prepare``; the design is in its docstring).

The train split is cut into ``prepare_shards`` contiguous shards, validation and test into one each
(``plan_shards``); every shard is tokenised and packed on its own, a batch of documents at a time,
into ``<parts>/<split>-<k>of<n>.arrow`` and marked done by the ``.json`` beside it (``pack_shard``),
``num_proc`` processes at once (``run_shards``, which skips shards marked done for the same identity);
``gather_split`` memory-maps a split's shards in order. Packing rules are ``elf.data.pack``'s.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from elf.config import DatasetSettings, content_settings
from elf.errors import ElfError
from elf.io import atomic_path, sha256_json, write_json
from elf.artifacts import ArtifactError, file_sha256, read_json

SPLITS = ("train", "validation", "test")
BATCH_DOCUMENTS = 1000      # documents (or pairs) tokenised per batch: the memory of one process


class ShardError(ElfError):
    """A shard of packed tokens is missing when the splits are gathered."""


def _features(task: str, max_length: int):
    import datasets
    row = {"input_ids": datasets.List(datasets.Value("int32"), length=max_length),
           "attention_mask": datasets.List(datasets.Value("int8"), length=max_length),
           "cond_seq_mask": datasets.List(datasets.Value("int8"), length=max_length),
           "source_length": datasets.Value("int32")}
    text = (["text"] if task == "unconditional" else ["source_text", "reference"])
    return datasets.Features(row | {name: datasets.Value("string") for name in text})


# --------------------------------------------------------------------------------------------------
# One shard: raw documents -> an Arrow file of packed rows, then its marker
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShardJob:
    """One shard of one split: its raw documents, where it goes, and what its content depends on."""
    split: str
    index: int
    count: int
    cap: int            # rows this shard may produce (0 = all): max_train_sequences on train
    data: Any           # the raw shard (a datasets.Dataset)
    path: Path          # <parts>/<split>-<k>of<n>.arrow; the marker is the .json beside it
    identity: str       # sha256 of settings, tokenizer, raw shard and packing code

    @property
    def marker(self) -> Path:
        return self.path.with_suffix(".json")

    @property
    def name(self) -> str:
        return f"{self.split} shard {self.index} of {self.count}"

    def done(self) -> bool:
        """Marked done for this identity, with its Arrow file present."""
        if not (self.marker.is_file() and self.path.is_file()):
            return False
        try:
            return read_json(self.marker).get("identity") == self.identity
        except (OSError, ArtifactError, AttributeError):
            return False


def one_row_per_record(settings: DatasetSettings) -> bool:
    """Conditional pairs, and the authors' unconditional rows, give one row each (no stream)."""
    return settings.task != "unconditional" or settings.source == "authors"


def _token_ids(batch: dict, columns: tuple[str, ...], texts: tuple[str, ...], tokenizer,
               where: str) -> list[list]:
    """The batch's id columns (the authors' sets), else its texts tokenised without special tokens."""
    from elf.data.authors import AuthorsDataError, check_ids

    if columns[0] not in batch:
        return [tokenizer(list(batch[c]), add_special_tokens=False)["input_ids"] for c in texts]
    ids = [list(batch[c]) for c in columns]
    try:
        for rows in ids:
            check_ids(rows, len(tokenizer), where)
    except AuthorsDataError as err:
        raise ElfError(str(err)) from err
    return ids


def _row_batches(job: ShardJob, settings: DatasetSettings, tokenizer, progress: bool):
    """Packed arrays (+ text columns) of one shard, a batch of raw documents at a time."""
    from elf.data.pack import StreamPacker, pack_token_pairs, pad_token_rows, rows_arrays

    batches = job.data.iter(batch_size=BATCH_DOCUMENTS)
    steps = tqdm(batches, total=-(-len(job.data) // BATCH_DOCUMENTS), desc=job.name, leave=False,
                 disable=not progress)
    authors = settings.source == "authors"
    if settings.task != "unconditional":
        for batch in steps:
            ids = _token_ids(batch, ("condition_input_ids", "input_ids"), ("source", "target"),
                             tokenizer, job.name)
            arrays = pack_token_pairs(*ids, tokenizer.eos_token_id, settings.max_length,
                                      settings.max_input_length, append_eos=not authors,
                                      source_pad_id=tokenizer.pad_token_id if settings.pad_source
                                      else None)
            yield arrays | {"source_text": list(batch["source"]), "reference": list(batch["target"])}, {}
        return
    if authors:
        for batch in steps:
            docs = _token_ids(batch, ("input_ids",), ("text",), tokenizer, job.name)[0]
            yield pad_token_rows(docs, tokenizer.pad_token_id, settings.max_length), \
                {"tokens_in": sum(len(d) for d in docs)}
        return
    packer = StreamPacker(tokenizer.eos_token_id, tokenizer.pad_token_id, settings.max_length, job.cap)
    for batch in steps:
        docs = tokenizer(list(batch["text"]), add_special_tokens=False)["input_ids"]
        rows = packer.add(docs)
        yield rows_arrays(rows), {"tokens_in": sum(len(d) + 1 for d in docs)}
        if packer.done:
            break
    yield packer.finish(), {"tail_tokens": packer.tail_tokens}


def _record_batch(arrays: dict, tokenizer, schema):
    """Packed arrays -> one Arrow record batch of the output schema (text decoded for unconditional)."""
    import pyarrow as pa

    if "source_text" not in arrays:
        real = [ids[mask == 1].tolist() for ids, mask in zip(arrays["input_ids"], arrays["attention_mask"])]
        arrays = arrays | {"text": tokenizer.batch_decode(real, skip_special_tokens=True)}
    columns = []
    for field in schema:
        values = arrays[field.name]
        if pa.types.is_fixed_size_list(field.type):
            flat = pa.array(np.ascontiguousarray(values).reshape(-1), type=field.type.value_type)
            columns.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
        else:
            columns.append(pa.array(values if field.type == pa.string() else np.asarray(values),
                                    type=field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def pack_shard(job: ShardJob, settings: DatasetSettings, tokenizer, progress: bool = True) -> dict:
    """Write the shard's Arrow file (atomically), then its marker; returns the marker's record."""
    import pyarrow as pa

    schema = _features(settings.task, settings.max_length).arrow_schema
    counts = {"rows": 0, "real_tokens": 0, "tokens_in": 0, "tail_tokens": 0}
    with atomic_path(job.path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for arrays, extra in _row_batches(job, settings, tokenizer, progress):
                for key, value in extra.items():
                    counts[key] += int(value)
                if len(arrays["input_ids"]):
                    writer.write_batch(_record_batch(arrays, tokenizer, schema))
                    counts["rows"] += len(arrays["input_ids"])
                    counts["real_tokens"] += int(np.sum(arrays["attention_mask"], dtype=np.int64))
                pa.default_memory_pool().release_unused()  # mimalloc keeps freed blocks otherwise
    record = {"identity": job.identity, "split": job.split, "shard": [job.index, job.count],
              "raw_documents": len(job.data), "sha256": file_sha256(job.path), **counts}
    write_json(job.marker, record)  # written last: marks the shard done
    return record


# --------------------------------------------------------------------------------------------------
# Plan, run in parallel, gather
# --------------------------------------------------------------------------------------------------

def _code_sha256() -> str:
    """Hash of the code a shard's bytes depend on, so a resumed run never mixes two versions."""
    from elf.data import authors, loaders, pack

    digest = hashlib.sha256()
    for module in (pack.__file__, loaders.__file__, authors.__file__, __file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


def plan_shards(raw, settings: DatasetSettings, parts: str | os.PathLike, tokenizer_id: str) -> list[ShardJob]:
    """Every split's shards: train in ``prepare_shards`` contiguous shards, the others in one."""
    code = _code_sha256()
    jobs = []
    for split in SPLITS:
        data = raw[split]
        cap = settings.max_train_sequences if split == "train" else 0
        if cap and one_row_per_record(settings):  # cap the records up front
            data = data.select(range(min(cap, len(data))))
        count = max(1, min(settings.prepare_shards if split == "train" else 1, len(data)))
        for index in range(count):
            shard = data.shard(count, index, contiguous=True) if count > 1 else data
            identity = sha256_json({"settings": content_settings(settings), "tokenizer": tokenizer_id,
                                    "raw": shard._fingerprint, "shard": [index, count], "cap": cap,
                                    "code": code})
            jobs.append(ShardJob(split, index, count, cap, shard,
                                 Path(parts) / f"{split}-{index}of{count}.arrow", identity))
    return jobs


def _usable_cores() -> int:
    """Cores this process may run on (under Slurm: the job's allocation)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_WORKER: dict = {}


def _init_worker(settings: DatasetSettings, tokenizer) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per process; the pool is the parallelism
    _WORKER.update(settings=settings, tokenizer=tokenizer)


def _pack_in_worker(job: ShardJob) -> tuple[ShardJob, dict]:
    return job, pack_shard(job, _WORKER["settings"], _WORKER["tokenizer"], progress=False)


def run_shards(jobs: list[ShardJob], settings: DatasetSettings, tokenizer, num_proc: int = 1,
               after_shard: Callable[[ShardJob], None] | None = None) -> list[ShardJob]:
    """Pack every shard not marked done, ``num_proc`` at a time; returns the shards packed now.

    ``after_shard(job)`` runs after each shard is marked done (tests raise there to simulate a kill).
    """
    todo = [job for job in jobs if not job.done()]
    if len(todo) < len(jobs):
        print(f"elf prepare: {len(jobs) - len(todo)} of {len(jobs)} shards already done, skipped",
              flush=True)
    procs = max(1, min(num_proc, len(todo), _usable_cores()))
    bar = tqdm(total=len(todo), desc="shards", unit="shard", disable=len(todo) <= 1)
    if procs == 1:
        results = ((job, pack_shard(job, settings, tokenizer)) for job in todo)
        pool = None
    else:  # fork: the workers inherit the tokenizer; each shard travels as a memory-mapped slice
        pool = multiprocessing.get_context("fork").Pool(procs, _init_worker, (settings, tokenizer))
        results = pool.imap_unordered(_pack_in_worker, todo)
    try:
        for job, _ in results:
            bar.update()
            if after_shard is not None:
                after_shard(job)
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
    return todo


def gather_split(jobs: list[ShardJob], cap: int = 0):
    """The split's shards, memory-mapped and concatenated in order (first ``cap`` rows; 0 = all).

    Refuses a shard that is not marked done, naming it. The fingerprint (recorded by save_to_disk,
    the tokens' identity downstream) hashes the shards' bytes, so it follows the content.
    """
    import datasets

    missing = [job for job in jobs if not job.done()]
    if missing:
        names = ", ".join(f"{job.name} ({job.path})" for job in missing)
        raise ShardError(f"cannot gather split {jobs[0].split!r}: {len(missing)} of {len(jobs)} shards "
                         f"not done: {names}; rerun `elf prepare` with the same arguments (it resumes)")
    records = [read_json(job.marker) for job in jobs]
    parts = [datasets.Dataset.from_file(str(job.path)) for job in jobs]
    data = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    rows = min(cap, len(data)) if cap else len(data)
    fingerprint = sha256_json({"shards": [r["sha256"] for r in records], "rows": rows})[:16]
    return data.select(range(rows), new_fingerprint=fingerprint), records


# --------------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------------
