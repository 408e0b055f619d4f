r"""``elf train``: an embedding store + a run's settings → a checkpoint directory.

Reads ``--store`` (the dataset's train split, Zarr, see ``elf embed``), or with an uncached
embedding ``--tokens`` (the packed token dataset, embedded per batch; kind ``learned``: embedded by a
table trained with the network, ``elf/train/learned.py``, as wide as ``--encoder``), and the
tokenizer (for the vocabulary size); writes ``--out``/``{ema,model}.safetensors``, ``config.json``,
``train_log.jsonl`` and, while running, ``resume/`` (a rerun of a killed job continues from it).
Under ``torchrun`` it trains with DDP on every process of the job; with ``--device xla`` (or
``ELF_DEVICE=xla``) in one process, data parallel (SPMD) over every XLA device of the host
(``elf.device``). ``$SETTINGS`` is the JSON the workflow passes the run's job (``snakemake -n -p``
prints each job's command):

    elf train --settings "$SETTINGS" \
        --store results/embeddings/owt/encoder/train.zarr --tokenizer results/models/tokenizer \
        --out results/runs/base
"""

from __future__ import annotations

from pathlib import Path

from elf.errors import ElfError
from elf.config import EmbeddingSettings, RunSettings, to_dict
from elf.stages.args import TrainSettings, device_errors, parse_train_settings


def register(sub) -> None:
    p = sub.add_parser("train", help="train one run's network on an embedding store",
                       description=__doc__)
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding, sizes, precision (as `snakemake -n -p` prints it for the run's job)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", help="train-split embedding store (.zarr): cached embeddings")
    source.add_argument("--tokens", help="packed token dir: embed on the fly (embedding cache: false)")
    p.add_argument("--encoder", help="with --tokens: encoder path or hub id of the embedding")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary size)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arg(p)
    p.set_defaults(func=run)


def add_device_arg(p) -> None:
    """``--device`` of the training stages (``train``, ``distill``)."""
    p.add_argument("--device", default="auto",
                   help="auto ($ELF_DEVICE if set, else cuda when available, else cpu), cpu, cuda, "
                   "or xla: data parallel (SPMD) over every XLA device of the host (torch_xla)")


def run(args) -> None:
    with device_errors(args.device):
        _run(args)


def _run(args) -> None:
    train_run(parse_train_settings(args.settings), store=args.store, tokens=args.tokens,
              encoder=args.encoder, tokenizer_ref=args.tokenizer, out=Path(args.out),
              progress=not args.no_progress, device_name=args.device)


def train_run(settings: TrainSettings, *, store: str | None, tokens: str | None, encoder: str | None,
              tokenizer_ref: str, out: Path, progress: bool, device_name: str = "auto") -> None:
    """Build the run's network and data, train it, write the run directory."""
    import torch

    from elf.artifacts import check_tokenizer, tokenizer_sha256
    from elf.artifacts.checks import check_store_for_run
    from elf.artifacts.names import (RUN_DATASET, RUN_EMBEDDING, RUN_PARAMETERS, RUN_PRECISION,
                                     RUN_SETTINGS, RUN_STATS, RUN_STORE, RUN_STORE_IDENTITY, RUN_TOKENIZER,
                                     RUN_TOKENS, RUN_TOKENS_FINGERPRINT, RUN_TRAIN_ROWS, TOKENIZER_SHA256)
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import ShuffledBatches
    from elf.io import output_lock
    from elf.model import ELF, run_model_config
    from elf.train.checkpoint import model_meta
    from elf.train.loop import init_distributed, train

    run_s, data_s, emb_s = settings.run, settings.dataset, settings.embedding
    if run_s.kind != "train":
        raise ElfError(f"run kind is {run_s.kind!r}; `elf train` trains kind 'train' runs only")
    if emb_s.kind == "learned" and not run_s.model.decode_head:
        raise ElfError("embedding kind 'learned' ties its table to the decode head's unembedding: "
                       "the run needs model.decode_head: true")
    rank, world_size, device = init_distributed(device_name)  # an unusable --device fails first
    tokenizer = load_tokenizer(tokenizer_ref)
    source = batch_source(emb_s, len(tokenizer), store=store, tokens=tokens, encoder=encoder)
    check_tokenizer(tokenizer_ref, *recorded_tokenizer(source, store=store, tokens=tokens))
    if store:
        check_store_for_run(store, conditional=source.conditional, seq_len=source.seq_len,
                            identity=source.store.identity, dataset=to_dict(data_s),
                            embedding=to_dict(emb_s))
    check_batch_fits(run_s, len(source), f"--store {store}" if store else f"--tokens {tokens}")
    try:
        cfg = run_model_config(run_s.model, settings.sizes, d=source.dim, vocab_size=len(tokenizer),
                               max_length=source.seq_len)
    except KeyError as err:
        raise ElfError(str(err)) from err
    torch.manual_seed(run_s.budget.seed)  # model initialisation
    model = ELF(cfg)
    covers_padding = data_s.task != "unconditional"
    step_fn, after_step, table_meta = learned_table(model, run_s, emb_s, covers_padding,
                                                    static_shapes=device.type == "xla")
    b = run_s.budget
    batches = ShuffledBatches(source, b.batch_size // b.grad_accum, seed=b.seed, rank=rank,
                              world_size=world_size, normalization=emb_s.normalization,
                              mean=emb_s.mean, std=emb_s.std)
    meta = model_meta(cfg, **{
        RUN_SETTINGS: to_dict(run_s), RUN_DATASET: to_dict(data_s), RUN_EMBEDDING: to_dict(emb_s),
        RUN_STORE: store, RUN_TOKENS: tokens, "encoder": encoder, RUN_TOKENIZER: str(tokenizer_ref),
        TOKENIZER_SHA256: tokenizer_sha256(tokenizer_ref), RUN_STORE_IDENTITY: source.store_identity,
        RUN_TOKENS_FINGERPRINT: source.tokens_fingerprint, RUN_STATS: source.stats,
        RUN_PRECISION: settings.precision, RUN_PARAMETERS: model.num_parameters(),
        RUN_TRAIN_ROWS: len(source),
        **({"learned_table": table_meta} if table_meta else {})})
    with output_lock(out, enabled=rank == 0):
        train(model, run_s, batches, out, meta, loss_covers_padding=covers_padding,
              seq_shape=(source.seq_len, source.dim), rank=rank, world_size=world_size, device=device,
              progress=progress, step_fn=step_fn, after_step=after_step, precision=settings.precision)
    batches.close()


def check_batch_fits(run_s: RunSettings, sequences: int, data: str) -> None:
    """A global batch drawn from at most the whole training split (the rule plan time applies where
    the split's size is known: ``elf.settings_checks``)."""
    if run_s.budget.batch_size > sequences:
        raise ElfError(f"--settings: config key 'run.budget.batch_size': got {run_s.budget.batch_size}, "
                       f"more than the {sequences} training sequences of {data}; allowed: at most "
                       f"{sequences}")


def recorded_tokenizer(source, *, store: str | None, tokens: str | None) -> tuple[dict, str]:
    """The tokenizer the training data was made with (the store's identity, or the tokens'
    provenance) and what recorded it."""
    from elf.artifacts import tokens_tokenizer
    from elf.artifacts.names import STORE_TOKENIZER

    if store:
        return source.store.identity.get(STORE_TOKENIZER), f"store {store}"
    return tokens_tokenizer(tokens), f"tokens {tokens}"


def learned_table(model, run_s: RunSettings, emb_s: EmbeddingSettings, covers_padding: bool,
                  static_shapes: bool = False):
    """Kind ``learned`` (R10): the table tied to the unembedding, seeded, its training step and
    renormalisation (``elf.train.learned``); (None, None, None) for every other kind."""
    if emb_s.kind != "learned":
        return None, None, None
    from elf.train.learned import TiedTable, learned_step

    table = TiedTable(model, mean=emb_s.mean, std=emb_s.std)
    table.init_(run_s.budget.seed)
    meta = {"tied_to": "unembed_kernel", "row_rms": table.rms, "init_seed": run_s.budget.seed,
            "renormalised": "every optimiser step", "gradient_through_target": True}
    return learned_step(table, run_s, covers_padding, static_shapes=static_shapes), \
        table.renormalise_, meta


def batch_source(emb_s: EmbeddingSettings, vocab_size: int, *, store: str | None, tokens: str | None,
                 encoder: str | None):
    """The cached store, or token ids embedded per batch (kind ``learned``: token ids only, the
    trainer embeds them with its table)."""
    from elf.embed.reader import OnTheFlySource, StoreSource
    from elf.embed.store import TokenArrays, open_store

    if store:
        if not emb_s.cache:
            raise ElfError("--store given but the embedding has cache: false (use --tokens)")
        return StoreSource(open_store(store))
    if emb_s.cache:
        raise ElfError("--tokens given but the embedding has cache: true (use --store)")
    arrays = TokenArrays.from_disk(tokens, "train")
    if emb_s.kind == "learned":
        return OnTheFlySource(arrays, None, dim=_table_width(encoder))
    from elf.embed.kinds import build_embedder  # an encoder's code only when embedding per batch

    return OnTheFlySource(arrays, build_embedder(emb_s, encoder, vocab_size, seed=0), None)


def _table_width(encoder: str | None) -> int:
    """A learned table is as wide as the embedding's encoder (the paper compares kinds at its width)."""
    from transformers import T5Config

    if encoder is None:
        raise ElfError("embedding kind 'learned' takes its width from the encoder: pass --encoder")
    from elf.hub import pretrained_kwargs

    name, kwargs = pretrained_kwargs(encoder, "--encoder")
    return T5Config.from_pretrained(name, **kwargs).d_model
