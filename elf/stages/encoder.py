r"""``elf encoder``: make the frozen T5 encoder that produces the clean embeddings (spec §2).

Reads: ``--settings`` (``EncoderSettings`` JSON), ``--tokenizer`` (a saved tokenizer folder or hub id),
``--tokens`` (a packed ``DatasetDict`` saved with ``save_to_disk``; trained on its ``train`` split, columns
``input_ids`` and ``attention_mask``).
Writes ``--out`` (atomically): ``T5EncoderModel.save_pretrained`` files, the tokenizer
(``save_pretrained``), and ``provenance.json`` (settings, losses, inputs). Load it with
``elf.embed.encoder.load_encoder(out)`` — the same call that loads ``t5-small`` by name.

``source: build`` trains a small T5 here with span corruption (``elf.embed.encoder``); ``source:
pretrained`` loads ``name_or_path`` from the hub (paper: ``t5-small``; needs network), checks it against
the tokenizer and stores a local copy, so later stages always read a folder.

Example:
    elf encoder --settings '{"d_model": 64, "steps": 300}' --tokenizer results/tokenizer \
        --tokens results/data/owt --out results/encoders/main
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from elf.artifacts.names import PROVENANCE_FILE
from elf.errors import ElfError
from elf.config import EncoderSettings, to_dict
from elf.io import atomic_dir, provenance, write_json
from elf.stages.args import parse_settings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "encoder", help="train (or fetch) the frozen T5 encoder",
        description=__doc__)
    parser.add_argument("--settings", required=True, help="EncoderSettings as JSON")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (or hub id)")
    parser.add_argument("--tokens", help="packed DatasetDict folder (required when source is build)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def _load_tokenizer(path: str):
    from elf.data.tokenizer import load_tokenizer
    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as err:
        raise ElfError(f"--tokenizer {path!r} could not be loaded: {err}") from err


def _load_train_tokens(path: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    import datasets
    if path is None:
        raise ElfError("--tokens is required to train an encoder (source: build)")
    try:
        splits = datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError) as err:
        raise ElfError(f"--tokens {path!r} is not a saved DatasetDict: {err}") from err
    if "train" not in splits:
        raise ElfError(f"--tokens {path!r} has no 'train' split (has: {', '.join(splits)})")
    train = splits["train"].with_format("numpy")
    missing = {"input_ids", "attention_mask"} - set(train.column_names)
    if missing or len(train) == 0:
        raise ElfError(f"--tokens {path!r}: train split is empty or lacks columns {sorted(missing)}")
    return (torch.from_numpy(np.asarray(train["input_ids"], dtype=np.int64)),
            torch.from_numpy(np.asarray(train["attention_mask"], dtype=np.int64)))


def run(args) -> None:
    make_encoder(parse_settings(args.settings, EncoderSettings, "encoder"), tokenizer_ref=args.tokenizer,
                 tokens=args.tokens, out=Path(args.out), progress=not args.no_progress)


def make_encoder(settings: EncoderSettings, *, tokenizer_ref: str, tokens: str | None, out: Path,
                 progress: bool) -> None:
    from elf.embed.encoder import check_pairing, encoder_part, load_encoder, train_span_corruption

    tokenizer = _load_tokenizer(tokenizer_ref)
    record = {"settings": to_dict(settings), "tokenizer": tokenizer_ref, "tokens": tokens}
    try:
        if settings.source == "build":
            input_ids, attention_mask = _load_train_tokens(tokens)
            model, losses = train_span_corruption(settings, tokenizer, input_ids, attention_mask,
                                                  progress=progress)
            encoder = encoder_part(model)
            tail = losses[-10:]
            record.update(final_loss=losses[-1], final_loss_mean10=sum(tail) / len(tail),
                          first_loss=losses[0], train_sequences=len(input_ids))
        else:
            from elf.hub import pretrained_ref

            ref = pretrained_ref(settings.name_or_path, settings.revision)
            encoder = load_encoder(ref)
            record.update(pretrained=ref)
        check_pairing(tokenizer, encoder)
    except ValueError as err:
        raise ElfError(str(err)) from err
    with atomic_dir(out) as tmp:
        encoder.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(Path(tmp) / PROVENANCE_FILE, provenance(**record))
