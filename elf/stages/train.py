"""``elf train``: an embedding store + a run's settings → a checkpoint directory.

Reads ``--store`` (the dataset's train split, Zarr, see ``elf embed``) and the tokenizer (for the
vocabulary size); writes ``--out``/``{ema,model}.safetensors``, ``config.json``, ``train_log.jsonl``
and, while running, ``resume/`` (a rerun of a killed job continues from it). Under ``torchrun`` it
trains with DDP on every process of the job:

    elf train --settings "$(elf settings --config config/config.yaml --run base)" \
        --store results/embeddings/owt/encoder/train.zarr --tokenizer results/models/tokenizer \
        --out results/runs/base
"""

from __future__ import annotations

import argparse
import json

from elf.cli import ElfError
from elf.config import ConfigError, DatasetSettings, EmbeddingSettings, RunSettings, from_dict, to_dict


def register(sub) -> None:
    p = sub.add_parser("train", help="train one run's network on an embedding store",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding, sizes (see `elf settings`)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", help="train-split embedding store (.zarr): cached embeddings")
    source.add_argument("--tokens", help="packed token dir: embed on the fly (embedding cache: false)")
    p.add_argument("--encoder", help="with --tokens: encoder path or hub id of the embedding")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary size)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def parse_train_settings(text: str) -> tuple[RunSettings, DatasetSettings, EmbeddingSettings, dict]:
    try:
        blob = json.loads(text)
        return (from_dict(RunSettings, blob["run"], "run"),
                from_dict(DatasetSettings, blob["dataset"], "dataset"),
                from_dict(EmbeddingSettings, blob["embedding"], "embedding"), blob.get("sizes", {}))
    except (json.JSONDecodeError, KeyError, ConfigError) as err:
        raise ElfError(f"--settings: {err}") from err


def run(args) -> None:
    import torch

    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import ShuffledBatches
    from elf.model import ELF, model_config
    from elf.train.checkpoint import model_meta
    from elf.train.loop import init_distributed, train

    run_s, data_s, emb_s, sizes = parse_train_settings(args.settings)
    if run_s.kind != "train":
        raise ElfError(f"run kind is {run_s.kind!r}; `elf train` trains kind 'train' runs only")
    tokenizer = load_tokenizer(args.tokenizer)
    source, identity, stats = _batch_source(args, emb_s, len(tokenizer))
    try:
        cfg = model_config(run_s.model.size, sizes, d=source.dim, vocab_size=len(tokenizer),
                           max_length=source.seq_len, bottleneck=run_s.model.bottleneck,
                           conditioning=run_s.model.conditioning, decode_head=run_s.model.decode_head)
    except KeyError as err:
        raise ElfError(str(err)) from err
    rank, world_size, device = init_distributed()
    torch.manual_seed(run_s.budget.seed)  # model initialisation
    model = ELF(cfg)
    b = run_s.budget
    batches = ShuffledBatches(source, b.batch_size // b.grad_accum, seed=b.seed, rank=rank,
                              world_size=world_size, normalization=emb_s.normalization,
                              mean=emb_s.mean, std=emb_s.std)
    meta = model_meta(cfg, run=to_dict(run_s), dataset=to_dict(data_s), embedding=to_dict(emb_s),
                      store=args.store, tokens=args.tokens, encoder=args.encoder,
                      tokenizer=str(args.tokenizer), store_identity=identity,
                      tokens_fingerprint=getattr(source, "tokens_fingerprint", None),
                      normalization_stats=stats, num_parameters=sum(
                          p.numel() for p in model.parameters()))
    train(model, run_s, batches, args.out, meta,
          loss_covers_padding=data_s.task != "unconditional", seq_shape=(source.seq_len, source.dim),
          rank=rank, world_size=world_size, device=device, progress=not args.no_progress)
    batches.close()


def _batch_source(args, emb_s: EmbeddingSettings, vocab_size: int):
    """The cached store, or token ids embedded per batch; returns (source, identity, stats)."""
    from elf.embed.kinds import build_embedder
    from elf.embed.reader import OnTheFlySource, StoreSource
    from elf.embed.store import TokenArrays, open_store

    if args.store:
        if not emb_s.cache:
            raise ElfError("--store given but the embedding has cache: false (use --tokens)")
        store = open_store(args.store)
        source = StoreSource(store)
        source.dim, source.seq_len = store.dim, store.seq_len
        return source, store.attrs.get("identity_sha256"), store.stats
    if emb_s.cache:
        raise ElfError("--tokens given but the embedding has cache: true (use --store)")
    if emb_s.kind == "learned":
        raise ElfError("embedding kind 'learned' (a table trained jointly with the flow, R10) is not "
                       "implemented yet")
    tokens = TokenArrays.from_disk(args.tokens, "train")
    embedder = build_embedder(emb_s, args.encoder, vocab_size, seed=0)
    source = OnTheFlySource(tokens, embedder, None)
    source.seq_len = tokens.rows(0, 1)["input_ids"].shape[1]
    source.tokens_fingerprint = tokens.fingerprint()
    return source, None, None
