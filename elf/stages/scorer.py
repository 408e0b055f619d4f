"""``elf scorer``: build the Gen. PPL scorer folder (spec §6) that ``elf score --scorer`` reads.

Reads ``--settings`` (ScorerSettings as JSON) and, for ``source: build``, a ``datasets`` folder
(``--corpus``, column ``text``, split ``heldout`` if present else ``train``); trains a byte-level BPE
tokenizer and a small GPT-2 on it. For ``source: pretrained`` it loads ``name_or_path`` (e.g.
``gpt2-large``; needs the hub or a local copy) and saves it, so the scoring rule always reads one folder.
Writes ``--out``: ``save_pretrained`` model + tokenizer and ``provenance.json`` (atomically).

    elf scorer --settings '{"vocab_size": 1024, "steps": 300}' --corpus results/data/owt --out results/scorer
"""

from __future__ import annotations

from elf.errors import ElfError
from elf.config import ScorerSettings, to_dict
from elf.stages.args import parse_settings, resolve_device
from elf.artifacts.records import SamplesFormatError, texts_sha256
from elf.evaluate.samples import read_text_column
from elf.io import provenance

CORPUS_SPLITS = ("heldout", "train")


def register(subparsers) -> None:
    parser = subparsers.add_parser("scorer", help="train the small GPT-2 Gen. PPL scorer",
                                   description=__doc__)
    parser.add_argument("--settings", required=True, help="ScorerSettings as a JSON object")
    parser.add_argument("--corpus", help="datasets folder with a `text` column (source: build)")
    parser.add_argument("--out", required=True, help="output folder (save_pretrained layout)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.set_defaults(func=run)


def run(args) -> None:
    make_scorer(parse_settings(args.settings, ScorerSettings, "scorer"), args.corpus, args.out,
                resolve_device(args.device))


def make_scorer(settings: ScorerSettings, corpus: str | None, out: str, device) -> None:
    # heavy imports here, not at module level: `elf --help` imports every stage
    from elf.evaluate.scorer import (load_scorer, save_scorer, train_bpe_tokenizer,
                                     train_scorer_model)

    if settings.source == "pretrained":
        from elf.hub import pretrained_ref

        ref = pretrained_ref(settings.name_or_path, settings.revision)
        model, tokenizer = load_scorer(ref)
        save_scorer(model, tokenizer, out, provenance(
            settings=to_dict(settings), source=ref, revision=settings.revision,
            commit=getattr(model.config, "_commit_hash", None)))
        return
    if not corpus:
        raise ElfError("--corpus is required when the scorer is built (source: build)")
    try:
        texts, split = read_text_column(corpus, CORPUS_SPLITS)
    except (SamplesFormatError, FileNotFoundError) as err:
        raise ElfError(f"--corpus: {err}") from err
    tokenizer = train_bpe_tokenizer(texts, settings.vocab_size, settings.context)
    try:
        model, losses = train_scorer_model(texts, tokenizer, settings, device)
    except ValueError as err:
        raise ElfError(f"--corpus {corpus}: {err}") from err
    record = provenance(settings=to_dict(settings), corpus=str(corpus), corpus_split=split,
                        corpus_documents=len(texts), corpus_sha256=texts_sha256(texts),
                        vocab_size=len(tokenizer), n_parameters=sum(p.numel() for p in model.parameters()),
                        loss_first=losses[0], loss_last=losses[-1], losses=losses)
    save_scorer(model.cpu(), tokenizer, out, record)
