r"""``elf prepare``: tokenise and pack one dataset into fixed-length model sequences (spec §2).

Reads: ``--settings`` (``DatasetSettings`` JSON), ``--tokenizer`` (a saved tokenizer folder or hub id),
``--raw-root`` (the ``elf corpora`` folder; needed when the dataset's source is ``embedded``).
Writes ``--out`` (atomically): a ``DatasetDict`` (``save_to_disk``) with splits train/validation/test
and columns ``input_ids`` (L int32), ``attention_mask`` (L int8), ``cond_seq_mask`` (L int8),
``source_length`` (int32), plus ``text`` (unconditional: the decoded text of each packed row, special
tokens dropped — the figures' "Dataset" reference) or ``source_text`` and ``reference`` (conditional:
the raw source and target of each row, for BLEU / ROUGE); and ``provenance.json``.
Packing rules are in ``elf.data.pack``; raw loading and split carving in ``elf.data.loaders``.
``source: authors`` reads the authors' token ids (``elf.data.authors``; ids beyond the tokenizer's
vocabulary are refused) and lays out one row per record as their collate does; its raw ``test``
split is tokenised here without special tokens and laid out the same way.
``max_train_sequences`` caps the train split only. The same inputs give byte-identical files.

Memory is one batch per process whatever the data's size: saved and hub datasets are memory-mapped,
and a local JSONL, Parquet or text file is streamed a block at a time into
``<out>.parts/raw/<split>.arrow`` and memory-mapped from there (its fingerprint hashes the file).

Shards (OpenWebText: 9B tokens, too big for one process's memory). The train split is cut into
``prepare_shards`` contiguous shards (``datasets.Dataset.shard(contiguous=True)``); validation and test
are one shard each. Every shard is tokenised and packed on its own, a batch of documents at a time
(``StreamPacker``), into ``<out>.parts/<split>-<k>of<n>.arrow``, then marked done by
``<split>-<k>of<n>.json`` (its row and token counts and an identity hash of the settings, tokenizer,
raw data and packing code). ``--num-proc`` processes work on the shards at once. A killed run, rerun,
skips the shards marked done for the same identity and redoes the rest. The gather memory-maps the shard
files in order (``Dataset.from_file``), writes the ``DatasetDict`` (``save_to_disk`` streams it in
500 MB pieces), then deletes ``<out>.parts``: peak disk is twice the packed data, memory one batch per
process.

Why not ``Dataset.map(num_proc=N)``: it ties the shard count to the process count and keeps its
resume state in fingerprinted cache files beside the raw data (for the embedded corpora: inside
another rule's output). Here the shard count is a setting, since it decides the packing, and the
process count is free.

What sharding changes. Conditional rows are one per pair, so any shard count gives identical rows.
Unconditional documents are concatenated and cut within each shard, so a shard boundary restarts the
stream: each shard drops its own ragged tail (< max_length tokens; OWT with 64 shards: < 64 x 1024
of 9e9 tokens, under 0.001 %), and a shard shorter than one row becomes one padded, masked row.
With one shard this is exactly ``pack_token_streams`` of the whole split. The output is determined
by the shard count, never by ``--num-proc``. ``provenance.json`` records per split the shard count,
the tokens in (documents + one EOS each) and the tail tokens dropped.

Example:
    elf prepare --settings '{"task": "unconditional", "source": "embedded", "name": "owt",
        "max_length": 128, "prepare_shards": 4}' --tokenizer results/tokenizer --raw-root results/corpora \
        --num-proc 2 --out results/data/owt
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from elf.artifacts.names import PROVENANCE_FILE, TOKENIZER_SHA256
from elf.errors import ElfError
from elf.config import DatasetSettings, to_dict
from elf.io import atomic_dir, provenance, write_json
from elf.stages.args import parse_settings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare", help="tokenise and pack a dataset into model sequences",
        description=__doc__)
    parser.add_argument("--settings", required=True, help="DatasetSettings as JSON")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (or hub id)")
    parser.add_argument("--raw-root", help="embedded corpora folder (source: embedded)")
    parser.add_argument("--carve-docs", type=int, default=5000,
                        help="documents carved from the end of train for each split the raw data "
                        "lacks (OpenWebText on the hub has only train; default 5000)")
    parser.add_argument("--num-proc", type=int, default=1,
                        help="processes packing shards at once (and downloading hub data); the "
                        "output does not depend on it (default 1)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.set_defaults(func=run)


def _parse_settings(text: str) -> DatasetSettings:
    settings = parse_settings(text, DatasetSettings, "dataset")
    if settings.task != "unconditional" and settings.max_input_length is None:
        raise ElfError(f"--settings: a {settings.task} dataset needs max_input_length")
    if settings.max_input_length is not None and settings.max_input_length >= settings.max_length:
        raise ElfError(f"--settings: max_input_length {settings.max_input_length} leaves no room "
                       f"for the target in max_length {settings.max_length}")
    return settings


def _split_record(records: list[dict], rows: int) -> dict:
    keys = ("tokens_in", "tail_tokens", "raw_documents", "real_tokens")
    total = {key: sum(r[key] for r in records) for key in keys}
    return {"shards": len(records), **total, "rows_before_cap": sum(r["rows"] for r in records),
            "rows": rows}


def _real_tokens(data, split_record: dict, batch_size: int) -> int:
    """Tokens with attention_mask 1: from the shard markers, or (capped split) counted in batches."""
    if split_record["rows"] == split_record["rows_before_cap"]:
        return split_record["real_tokens"]
    batches = data.with_format("numpy", columns=["attention_mask"]).iter(batch_size=batch_size)
    return int(sum(np.sum(b["attention_mask"], dtype=np.int64) for b in batches))


def run(args) -> None:
    prepare_dataset(_parse_settings(args.settings), tokenizer_ref=args.tokenizer, raw_root=args.raw_root,
                    carve_docs=args.carve_docs, num_proc=args.num_proc, out=Path(args.out))


def prepare_dataset(settings: DatasetSettings, *, tokenizer_ref: str, raw_root: str | None,
                    carve_docs: int, num_proc: int, out: Path) -> None:
    """Load the raw splits, pack them in shards, gather and save the token dataset."""
    import datasets

    from elf.artifacts import tokenizer_sha256
    from elf.data.loaders import CarveSizes, DataError, load_raw
    from elf.data.shards import BATCH_DOCUMENTS, SPLITS, gather_split, plan_shards, run_shards
    from elf.data.tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(tokenizer_ref)
    except (OSError, ValueError) as err:
        raise ElfError(f"--tokenizer {tokenizer_ref!r} could not be loaded: {err}") from err
    tokenizer_sha = tokenizer_sha256(tokenizer_ref)
    parts = Path(f"{out}.parts")  # shard files, and a local raw file streamed into Arrow
    carve = CarveSizes(carve_docs, carve_docs, carve_docs)
    try:
        raw = load_raw(settings, raw_root, carve, num_proc=num_proc, cache_dir=parts / "raw")
    except DataError as err:
        raise ElfError(str(err)) from err
    jobs = plan_shards(raw, settings, parts, tokenizer_sha or str(tokenizer_ref))
    run_shards(jobs, settings, tokenizer, num_proc)
    packed, shard_records = {}, {}
    for split in SPLITS:
        cap = settings.max_train_sequences if split == "train" else 0
        packed[split], records = gather_split([j for j in jobs if j.split == split], cap)
        shard_records[split] = _split_record(records, len(packed[split]))
    real_tokens = {s: _real_tokens(packed[s], shard_records[s], BATCH_DOCUMENTS) for s in SPLITS}
    record = {"settings": to_dict(settings), "tokenizer": tokenizer_ref,
              "raw_root": raw_root, "raw_documents": {s: len(raw[s]) for s in SPLITS},
              "sequences": {s: len(packed[s]) for s in SPLITS}, "real_tokens": real_tokens,
              "shards": shard_records}
    if tokenizer_sha:
        record[TOKENIZER_SHA256] = tokenizer_sha
    with atomic_dir(out) as tmp:
        datasets.DatasetDict(packed).save_to_disk(str(tmp))
        write_json(Path(tmp) / PROVENANCE_FILE, provenance(**record))
    shutil.rmtree(parts, ignore_errors=True)
