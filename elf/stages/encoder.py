r"""``elf encoder``: make the frozen T5 encoder that produces the clean embeddings (spec §2).

Reads: ``--settings`` (``EncoderSettings`` JSON), ``--tokenizer`` (a saved tokenizer folder or hub id),
``--tokens`` (a packed ``DatasetDict`` saved with ``save_to_disk``; trained on its ``train`` split, columns
``input_ids``, ``attention_mask`` and ``cond_seq_mask``).
Writes ``--out`` (atomically): ``T5EncoderModel.save_pretrained`` files, the tokenizer
(``save_pretrained``), and ``provenance.json`` (settings, losses, inputs, device, precision). Load it
with ``elf.embed.encoder.load_encoder(out)`` — the same call that loads ``t5-small`` by name.

``source: build`` trains a small T5 here with span corruption (``elf.embed.encoder``; paper R06) as the
other training stages train: on ``--device`` (``auto``: CUDA when available) under ``--precision``
(``elf.precision``), streaming token rows from the memory-mapped train split in epochs
(``ShuffledBatches``: a seeded permutation per epoch, each row once; memory independent of the number
of rows apart from the permutation, 8 bytes a row), span-corrupted in the batches' prefetch thread
beside the training step, with the paper's schedule (linear warm-up, cosine decay). Every
``checkpoint_every`` steps it writes ``<out>.partial/resume/state.pt`` (``elf.train.checkpoint``: replaced
in one rename, an unreadable one skipped), so a rerun of a killed job continues with the same weights;
a state made for other settings, tokens or precision is ignored. ``source: pretrained`` loads
``name_or_path`` from the hub (paper: ``t5-small``; needs network), checks it against the tokenizer and
stores a local copy, so later stages always read a folder.

Example:
    elf encoder --settings '{"d_model": 64, "steps": 300}' --tokenizer results/tokenizer \
        --tokens results/data/owt --out results/encoders/main --device auto --precision fp32
"""

from __future__ import annotations

import shutil
from pathlib import Path

from elf.artifacts.names import PROVENANCE_FILE
from elf.errors import ElfError
from elf.config import PRECISIONS, EncoderSettings, to_dict
from elf.io import atomic_dir, output_lock, provenance, sha256_json, write_json
from elf.stages.args import parse_settings, resolve_device

STAGING = ".partial"  # <out>.partial/resume/: the resume state of a build, removed once <out> is written


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "encoder", help="train (or fetch) the frozen T5 encoder",
        description=__doc__)
    parser.add_argument("--settings", required=True, help="EncoderSettings as JSON")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (or hub id)")
    parser.add_argument("--tokens", help="packed DatasetDict folder (required when source is build)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--device", default="auto",
                        help="build: auto ($ELF_DEVICE if set, else cuda when available, else cpu), "
                        "cpu or cuda")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="build: the precision policy of the T5's forward (elf/precision.py)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def _load_tokenizer(path: str):
    from elf.data.tokenizer import load_tokenizer
    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as err:
        raise ElfError(f"--tokenizer {path!r} could not be loaded: {err}") from err


def span_corruption_batches(rows, settings: EncoderSettings, vocab_size: int):
    """Token rows (``TokenArrays`` or a dict of arrays) in shuffled, resumable, span-corrupted batches
    (``ShuffledBatches``, ``SpanCorruptor`` in its prefetch thread), as ``train_span_corruption`` takes
    them; raises ValueError for rows it cannot batch."""
    from elf.embed.encoder import SpanCorruptor, sentinel_ids
    from elf.embed.reader import OnTheFlySource, ShuffledBatches

    return ShuffledBatches(OnTheFlySource(rows, None, dim=settings.d_model), settings.batch_size,
                           seed=settings.seed, transform=SpanCorruptor(settings.seed, sentinel_ids(vocab_size)))


def train_batches(path: str | None, settings: EncoderSettings, vocab_size: int):
    """The train split's token rows in span-corrupted batches (``span_corruption_batches`` over the
    memory-mapped split, nothing loaded whole) and the rows."""
    from elf.embed.arrays import StoreError, TokenArrays

    if path is None:
        raise ElfError("--tokens is required to train an encoder (source: build)")
    try:
        rows = TokenArrays.from_disk(path, "train")
    except (StoreError, ValueError) as err:
        raise ElfError(f"--tokens {path!r}: {err}") from err
    try:
        return span_corruption_batches(rows, settings, vocab_size), rows
    except ValueError as err:
        raise ElfError(f"--tokens {path!r}: train split: {err}") from err


def run(args) -> None:
    make_encoder(parse_settings(args.settings, EncoderSettings, "encoder"), tokenizer_ref=args.tokenizer,
                 tokens=args.tokens, out=Path(args.out), progress=not args.no_progress,
                 device_name=args.device, precision=args.precision)


def make_encoder(settings: EncoderSettings, *, tokenizer_ref: str, tokens: str | None, out: Path,
                 progress: bool, device_name: str = "auto", precision: str = "fp32",
                 crash_after_step: int | None = None) -> None:
    """Build (train) or fetch the encoder, pair-check it with the tokenizer, write ``out``."""
    from elf.embed.encoder import check_pairing, load_encoder

    tokenizer = _load_tokenizer(tokenizer_ref)
    record = {"settings": to_dict(settings), "tokenizer": tokenizer_ref, "tokens": tokens}
    staging = Path(f"{out}{STAGING}")
    try:
        if settings.source == "build":
            with output_lock(out):
                encoder, trained = _build(settings, tokenizer, tokens, staging, progress=progress,
                                          device_name=device_name, precision=precision,
                                          crash_after_step=crash_after_step)
            record.update(trained)
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
    shutil.rmtree(staging, ignore_errors=True)


def _build(settings: EncoderSettings, tokenizer, tokens: str | None, staging: Path, *, progress: bool,
           device_name: str, precision: str, crash_after_step: int | None):
    """Train the T5 (resuming from ``staging`` when its state is for these inputs); its encoder and
    what provenance records of the training."""
    from elf.embed.encoder import encoder_part, train_span_corruption
    from elf.train.checkpoint import load_resume, save_resume

    device = resolve_device(device_name)
    if device.type not in ("cpu", "cuda"):
        raise ElfError(f"--device {device_name}: the encoder trains on cpu or cuda, not {device.type}")
    batches, rows = train_batches(tokens, settings, len(tokenizer))
    run_hash = sha256_json({"settings": to_dict(settings), "tokens": rows.fingerprint(),
                            "vocab": len(tokenizer), "precision": precision})
    state = load_resume(staging)
    resume = state if state is not None and state.get("run_hash") == run_hash else None
    try:
        model, losses = train_span_corruption(
            settings, tokenizer, batches, device=device, precision=precision, progress=progress,
            resume=resume, save_state=lambda s: save_resume(staging, {**s, "run_hash": run_hash}),
            after_step=None if crash_after_step is None else _crash_after(crash_after_step))
    finally:
        batches.close()
    tail = losses[-10:]
    trained = dict(final_loss=losses[-1], final_loss_mean10=sum(tail) / len(tail), first_loss=losses[0],
                   losses=losses, train_sequences=len(rows), batches_per_epoch=len(batches),
                   epochs=settings.steps / len(batches), device=str(device), precision=precision,
                   resumed_from_step=int(resume["step"]) if resume else 0)
    return encoder_part(model.cpu()), trained


def _crash_after(step: int):
    """Tests: a kill after optimiser step ``step`` (``elf.train.loop.CrashForTest``)."""
    from elf.train.loop import CrashForTest

    def after(done: int) -> None:
        if done == step:
            raise CrashForTest(f"simulated crash after encoder step {done}")
    return after
