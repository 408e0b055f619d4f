"""``elf tokenizer``: make the T5-style tokenizer (trained on the embedded corpora, or ``t5-small``).

Reads: ``--settings`` (``TokenizerSettings`` JSON) and, for ``source: build``, ``--corpora`` (the folder
``elf corpora`` wrote; trained on the train splits of owt, both wmt sides, xsum documents and summaries).
Writes ``--out`` (atomically): the tokenizer's ``save_pretrained`` files and ``provenance.json``. Load it
with ``elf.data.tokenizer.load_tokenizer(out)`` (= ``AutoTokenizer.from_pretrained``). ``source:
pretrained`` loads ``name_or_path`` from the hub (paper: ``t5-small``; needs network) and stores a copy.

Example:
    elf tokenizer --settings '{"vocab_size": 1024}' --corpora results/corpora --out results/tokenizer
"""

from __future__ import annotations

import json
from pathlib import Path

from elf.cli import ElfError
from elf.config import ConfigError, TokenizerSettings, from_dict, to_dict
from elf.io import atomic_dir, provenance, sha256_file, sha256_json, write_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tokenizer", help="train (or fetch) the T5-style tokenizer",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", required=True, help="TokenizerSettings as JSON")
    parser.add_argument("--corpora", help="embedded corpora folder (required when source is build)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.set_defaults(func=run)


def folder_sha256(folder: str | Path) -> str:
    """One hash of every file under ``folder`` (relative path -> sha256)."""
    root = Path(folder)
    return sha256_json({str(f.relative_to(root)): sha256_file(f)
                        for f in sorted(root.rglob("*")) if f.is_file()})


def run(args) -> None:
    from elf.data.tokenizer import corpus_texts, load_tokenizer, train_tokenizer

    try:
        settings = from_dict(TokenizerSettings, json.loads(args.settings), "tokenizer")
    except (ConfigError, json.JSONDecodeError) as err:
        raise ElfError(f"--settings: {err}") from err
    record = {"settings": to_dict(settings)}
    if settings.source == "build":
        if not args.corpora or not Path(args.corpora).is_dir():
            raise ElfError(f"--corpora {args.corpora!r}: the embedded corpora folder is required "
                           "to build a tokenizer (run `elf corpora`)")
        try:
            tokenizer = train_tokenizer(corpus_texts(args.corpora), settings.vocab_size)
        except FileNotFoundError as err:
            raise ElfError(f"--corpora {args.corpora!r}: {err}") from err
        record["corpora"] = {"path": args.corpora, "sha256": folder_sha256(args.corpora)}
    else:
        from elf.hub import pretrained_ref

        ref = pretrained_ref(settings.name_or_path, settings.revision)
        try:
            tokenizer = load_tokenizer(ref)
        except (OSError, ValueError) as err:
            raise ElfError(f"tokenizer '{ref}' could not be loaded: {err}") from err
        record["pretrained"] = ref
    record["vocab_size"] = len(tokenizer)
    with atomic_dir(args.out) as tmp:
        tokenizer.save_pretrained(str(tmp))
        write_json(Path(tmp) / "provenance.json", provenance(**record))
