"""``elf prepare``: tokenise and pack one dataset into fixed-length model sequences (spec §2).

Reads: ``--settings`` (``DatasetSettings`` JSON), ``--tokenizer`` (a saved tokenizer folder or hub id),
``--raw-root`` (the ``elf corpora`` folder; needed when the dataset's source is ``embedded``).
Writes ``--out`` (atomically): a ``DatasetDict`` (``save_to_disk``) with splits train/validation/test
and columns ``input_ids`` (L int32), ``attention_mask`` (L int8), ``cond_seq_mask`` (L int8),
``source_length`` (int32), plus ``text`` (unconditional: the decoded text of each packed row, special
tokens dropped — the figures' "Dataset" reference) or ``source_text`` and ``reference`` (conditional:
the raw source and target of each row, for BLEU / ROUGE); and ``provenance.json``.
Packing rules are in ``elf.data.pack``; raw loading and split carving in ``elf.data.loaders``.
``max_train_sequences`` caps the train split only. The same inputs give byte-identical files.

Example:
    elf prepare --settings '{"task": "unconditional", "source": "embedded", "name": "owt",
        "max_length": 128}' --tokenizer results/tokenizer --raw-root results/corpora --out results/data/owt
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from elf.cli import ElfError
from elf.config import ConfigError, DatasetSettings, from_dict, to_dict
from elf.io import atomic_dir, provenance, sha256_file, write_json

SPLITS = ("train", "validation", "test")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare", help="tokenise and pack a dataset into model sequences",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", required=True, help="DatasetSettings as JSON")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (or hub id)")
    parser.add_argument("--raw-root", help="embedded corpora folder (source: embedded)")
    parser.add_argument("--carve-docs", type=int, default=5000,
                        help="documents carved from the end of train for each split the raw data "
                        "lacks (OpenWebText on the hub has only train; default 5000)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.set_defaults(func=run)


def _features(task: str, max_length: int):
    import datasets
    row = {"input_ids": datasets.List(datasets.Value("int32"), length=max_length),
           "attention_mask": datasets.List(datasets.Value("int8"), length=max_length),
           "cond_seq_mask": datasets.List(datasets.Value("int8"), length=max_length),
           "source_length": datasets.Value("int32")}
    text = (["text"] if task == "unconditional" else ["source_text", "reference"])
    return datasets.Features(row | {name: datasets.Value("string") for name in text})


def pack_split(raw, settings: DatasetSettings, tokenizer, max_sequences: int) -> dict:
    """Packed arrays plus the text columns of one raw split."""
    from elf.data.pack import pack_conditional, pack_unconditional

    if settings.task == "unconditional":
        arrays = pack_unconditional(raw["text"], tokenizer, settings.max_length, max_sequences)
        real = [ids[mask == 1] for ids, mask in zip(arrays["input_ids"], arrays["attention_mask"])]
        arrays["text"] = tokenizer.batch_decode([r.tolist() for r in real], skip_special_tokens=True)
        return arrays
    if max_sequences > 0:
        raw = raw.select(range(min(max_sequences, len(raw))))
    sources, targets = raw["source"], raw["target"]
    arrays = pack_conditional(sources, targets, tokenizer, settings.max_length,
                              settings.max_input_length)
    return arrays | {"source_text": list(sources), "reference": list(targets)}


def run(args) -> None:
    import datasets

    from elf.data.loaders import CarveSizes, DataError, load_raw
    from elf.data.tokenizer import load_tokenizer

    try:
        settings = from_dict(DatasetSettings, json.loads(args.settings), "dataset")
    except (ConfigError, json.JSONDecodeError) as err:
        raise ElfError(f"--settings: {err}") from err
    if settings.task != "unconditional" and settings.max_input_length is None:
        raise ElfError(f"--settings: a {settings.task} dataset needs max_input_length")
    if settings.max_input_length is not None and settings.max_input_length >= settings.max_length:
        raise ElfError(f"--settings: max_input_length {settings.max_input_length} leaves no room "
                       f"for the target in max_length {settings.max_length}")
    try:
        tokenizer = load_tokenizer(args.tokenizer)
    except (OSError, ValueError) as err:
        raise ElfError(f"--tokenizer {args.tokenizer!r} could not be loaded: {err}") from err
    carve = CarveSizes(args.carve_docs, args.carve_docs, args.carve_docs)
    try:
        raw = load_raw(settings, args.raw_root, carve)
    except DataError as err:
        raise ElfError(str(err)) from err
    features = _features(settings.task, settings.max_length)
    packed, real_tokens = {}, {}
    for split in SPLITS:
        cap = settings.max_train_sequences if split == "train" else 0
        arrays = pack_split(raw[split], settings, tokenizer, cap)
        real_tokens[split] = int(np.sum(arrays["attention_mask"], dtype=np.int64))
        packed[split] = datasets.Dataset.from_dict(arrays, features=features)
    record = {"settings": to_dict(settings), "tokenizer": args.tokenizer,
              "raw_root": args.raw_root, "raw_documents": {s: len(raw[s]) for s in SPLITS},
              "sequences": {s: len(packed[s]) for s in SPLITS}, "real_tokens": real_tokens}
    tokenizer_file = Path(args.tokenizer) / "tokenizer.json"
    if tokenizer_file.is_file():
        record["tokenizer_sha256"] = sha256_file(tokenizer_file)
    with atomic_dir(args.out) as tmp:
        datasets.DatasetDict(packed).save_to_disk(str(tmp))
        write_json(Path(tmp) / "provenance.json", provenance(**record))
