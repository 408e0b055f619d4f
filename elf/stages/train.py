"""``elf train``: an embedding store + a run's settings → a checkpoint directory.

Reads ``--store`` (the dataset's train split, Zarr, see ``elf embed``), or with an uncached
embedding ``--tokens`` (the packed token dataset, embedded per batch; kind ``learned``: embedded by a
table trained with the network, ``elf/embed/learned.py``, as wide as ``--encoder``), and the
tokenizer (for the vocabulary size); writes ``--out``/``{ema,model}.safetensors``, ``config.json``,
``train_log.jsonl`` and, while running, ``resume/`` (a rerun of a killed job continues from it).
Under ``torchrun`` it trains with DDP on every process of the job; with ``--device xla`` (or
``ELF_DEVICE=xla``) on one replica per XLA device, which it starts itself (``elf.device``):

    elf train --settings "$(elf settings --config config/config.yaml --run base)" \
        --store results/embeddings/owt/encoder/train.zarr --tokenizer results/models/tokenizer \
        --out results/runs/base
"""

from __future__ import annotations

import argparse
import json
import threading

from elf.cli import ElfError
from elf.config import ConfigError, DatasetSettings, EmbeddingSettings, RunSettings, from_dict, to_dict


def register(sub) -> None:
    p = sub.add_parser("train", help="train one run's network on an embedding store",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding, sizes, precision (see `elf settings`)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", help="train-split embedding store (.zarr): cached embeddings")
    source.add_argument("--tokens", help="packed token dir: embed on the fly (embedding cache: false)")
    p.add_argument("--encoder", help="with --tokens: encoder path or hub id of the embedding")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary size)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arg(p)
    p.set_defaults(func=run)


# torch.manual_seed is process-wide, and XLA replicas on the CPU backend are threads of one process
_SEEDED_INIT = threading.Lock()


def add_device_arg(p) -> None:
    """``--device`` of the training stages (``train``, ``distill``)."""
    p.add_argument("--device", default="auto",
                   help="auto ($ELF_DEVICE if set, else cuda when available, else cpu), cpu, cuda, "
                   "or xla: data parallel over every XLA device of the host (torch_xla)")


def on_replicas(stage_run, args) -> None:
    """Run ``stage_run(args)`` here, or on xla once per XLA device (``elf.device.launch``)."""
    from elf.device import DeviceError, launch, wants_xla

    if not wants_xla(args.device):
        stage_run(args)
        return
    try:
        launch(_replica, (stage_run, args))
    except DeviceError as err:
        raise ElfError(f"--device {args.device}: {err}") from err


def _replica(index: int, stage_run, args) -> None:
    stage_run(args)


def parse_train_settings(text: str) -> tuple[RunSettings, DatasetSettings, EmbeddingSettings, dict]:
    try:
        blob = json.loads(text)
        return (from_dict(RunSettings, blob["run"], "run"),
                from_dict(DatasetSettings, blob["dataset"], "dataset"),
                from_dict(EmbeddingSettings, blob["embedding"], "embedding"), blob.get("sizes", {}))
    except (json.JSONDecodeError, KeyError, ConfigError) as err:
        raise ElfError(f"--settings: {err}") from err


def parse_precision(text: str) -> str:
    """The precision policy of ``--settings`` (key ``precision``; fp32 when absent)."""
    from elf.precision import check_precision
    try:
        return check_precision(json.loads(text).get("precision", "fp32"))
    except ValueError as err:
        raise ElfError(f"--settings: {err}") from err


def run(args) -> None:
    on_replicas(_run, args)


def _run(args) -> None:
    import torch

    from elf.artifacts import check_tokenizer, tokenizer_sha256
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import ShuffledBatches
    from elf.io import output_lock
    from elf.model import ELF, model_config
    from elf.train.checkpoint import model_meta
    from elf.train.loop import init_distributed, train

    run_s, data_s, emb_s, sizes = parse_train_settings(args.settings)
    precision = parse_precision(args.settings)
    if run_s.kind != "train":
        raise ElfError(f"run kind is {run_s.kind!r}; `elf train` trains kind 'train' runs only")
    if emb_s.kind == "learned" and not run_s.model.decode_head:
        raise ElfError("embedding kind 'learned' ties its table to the decode head's unembedding: "
                       "the run needs model.decode_head: true")
    tokenizer = load_tokenizer(args.tokenizer)
    source = _batch_source(args, emb_s, len(tokenizer))
    check_tokenizer(args.tokenizer, *_recorded_tokenizer(args, source))
    try:
        cfg = model_config(run_s.model.size, sizes, d=source.dim, vocab_size=len(tokenizer),
                           max_length=source.seq_len, bottleneck=run_s.model.bottleneck,
                           conditioning=run_s.model.conditioning, decode_head=run_s.model.decode_head)
    except KeyError as err:
        raise ElfError(str(err)) from err
    rank, world_size, device = init_distributed(args.device)
    with _SEEDED_INIT:
        torch.manual_seed(run_s.budget.seed)  # model initialisation
        model = ELF(cfg)
    covers_padding = data_s.task != "unconditional"
    step_fn, after_step, table_meta = _learned_table(model, run_s, emb_s, covers_padding,
                                                     static_shapes=device.type == "xla")
    b = run_s.budget
    batches = ShuffledBatches(source, b.batch_size // b.grad_accum, seed=b.seed, rank=rank,
                              world_size=world_size, normalization=emb_s.normalization,
                              mean=emb_s.mean, std=emb_s.std)
    meta = model_meta(cfg, run=to_dict(run_s), dataset=to_dict(data_s), embedding=to_dict(emb_s),
                      store=args.store, tokens=args.tokens, encoder=args.encoder,
                      tokenizer=str(args.tokenizer), tokenizer_sha256=tokenizer_sha256(args.tokenizer),
                      store_identity=source.store_identity,
                      tokens_fingerprint=source.tokens_fingerprint,
                      normalization_stats=source.stats, precision=precision, num_parameters=sum(
                          p.numel() for p in model.parameters()),
                      **({"learned_table": table_meta} if table_meta else {}))
    with output_lock(args.out, enabled=rank == 0):
        train(model, run_s, batches, args.out, meta, loss_covers_padding=covers_padding,
              seq_shape=(source.seq_len, source.dim), rank=rank, world_size=world_size, device=device,
              progress=not args.no_progress, step_fn=step_fn, after_step=after_step,
              precision=precision)
    batches.close()


def _recorded_tokenizer(args, source) -> tuple[dict, str]:
    """The tokenizer the training data was made with (the store's identity, or the tokens'
    provenance) and what recorded it."""
    from elf.artifacts import tokens_tokenizer

    if args.store:
        return (source.store.attrs.get("identity") or {}).get("tokenizer"), f"store {args.store}"
    return tokens_tokenizer(args.tokens), f"tokens {args.tokens}"


def _learned_table(model, run_s: RunSettings, emb_s: EmbeddingSettings, covers_padding: bool,
                   static_shapes: bool = False):
    """Kind ``learned`` (R10): the table tied to the unembedding, seeded, its training step and
    renormalisation (``elf.embed.learned``); (None, None, None) for every other kind."""
    if emb_s.kind != "learned":
        return None, None, None
    from elf.embed.learned import TiedTable, learned_step

    table = TiedTable(model, mean=emb_s.mean, std=emb_s.std)
    table.init_(run_s.budget.seed)
    meta = {"tied_to": "unembed_kernel", "row_rms": table.rms, "init_seed": run_s.budget.seed,
            "renormalised": "every optimiser step", "gradient_through_target": True}
    return learned_step(table, run_s, covers_padding, static_shapes=static_shapes), \
        table.renormalise_, meta


def _batch_source(args, emb_s: EmbeddingSettings, vocab_size: int):
    """The cached store, or token ids embedded per batch (kind ``learned``: token ids only, the
    trainer embeds them with its table)."""
    from elf.embed.kinds import build_embedder
    from elf.embed.reader import OnTheFlySource, StoreSource
    from elf.embed.store import TokenArrays, open_store

    if args.store:
        if not emb_s.cache:
            raise ElfError("--store given but the embedding has cache: false (use --tokens)")
        return StoreSource(open_store(args.store))
    if emb_s.cache:
        raise ElfError("--tokens given but the embedding has cache: true (use --store)")
    tokens = TokenArrays.from_disk(args.tokens, "train")
    if emb_s.kind == "learned":
        return OnTheFlySource(tokens, None, dim=_table_width(args.encoder))
    return OnTheFlySource(tokens, build_embedder(emb_s, args.encoder, vocab_size, seed=0), None)


def _table_width(encoder: str | None) -> int:
    """A learned table is as wide as the embedding's encoder (the paper compares kinds at its width)."""
    from transformers import T5Config

    if encoder is None:
        raise ElfError("embedding kind 'learned' takes its width from the encoder: pass --encoder")
    from elf.hub import pretrained_kwargs

    name, kwargs = pretrained_kwargs(encoder, "--encoder")
    return T5Config.from_pretrained(name, **kwargs).d_model
