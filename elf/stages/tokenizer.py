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

from pathlib import Path

from elf.artifacts.names import PROVENANCE_FILE
from elf.artifacts.records import folder_sha256
from elf.errors import ElfError
from elf.config import TokenizerSettings, to_dict
from elf.io import atomic_dir, provenance, write_json
from elf.stages.args import parse_settings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tokenizer", help="train (or fetch) the T5-style tokenizer",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", required=True, help="TokenizerSettings as JSON")
    parser.add_argument("--corpora", help="embedded corpora folder (required when source is build)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.set_defaults(func=run)


def run(args) -> None:
    make_tokenizer(parse_settings(args.settings, TokenizerSettings, "tokenizer"), args.corpora,
                   Path(args.out))


def make_tokenizer(settings: TokenizerSettings, corpora: str | None, out: Path) -> None:
    from elf.data.tokenizer import corpus_texts, load_tokenizer, train_tokenizer

    record = {"settings": to_dict(settings)}
    if settings.source == "build":
        if not corpora or not Path(corpora).is_dir():
            raise ElfError(f"--corpora {corpora!r}: the embedded corpora folder is required "
                           "to build a tokenizer (run `elf corpora`)")
        try:
            tokenizer = train_tokenizer(corpus_texts(corpora), settings.vocab_size)
        except FileNotFoundError as err:
            raise ElfError(f"--corpora {corpora!r}: {err}") from err
        record["corpora"] = {"path": corpora, "sha256": folder_sha256(corpora)}
    else:
        from elf.hub import pretrained_ref

        ref = pretrained_ref(settings.name_or_path, settings.revision)
        try:
            tokenizer = load_tokenizer(ref)
        except (OSError, ValueError) as err:
            raise ElfError(f"tokenizer '{ref}' could not be loaded: {err}") from err
        record["pretrained"] = ref
    record["vocab_size"] = len(tokenizer)
    with atomic_dir(out) as tmp:
        tokenizer.save_pretrained(str(tmp))
        write_json(Path(tmp) / PROVENANCE_FILE, provenance(**record))
