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

import dataclasses
import json

from elf.cli import ElfError
from elf.config import ConfigError, DatasetSettings, EmbeddingSettings, RunSettings, from_dict, to_dict


def register(sub) -> None:
    p = sub.add_parser("train", help="train one run's network on an embedding store",
                       description=__doc__, formatter_class=_raw())
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding, sizes (see `elf settings`)")
    p.add_argument("--store", required=True, help="train-split embedding store (.zarr)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary size)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _raw():
    import argparse
    return argparse.RawDescriptionHelpFormatter


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
    from elf.embed.store import open_store
    from elf.model import ELF, model_config
    from elf.train.checkpoint import model_meta
    from elf.train.loop import init_distributed, train

    run_s, data_s, emb_s, sizes = parse_train_settings(args.settings)
    if run_s.kind != "train":
        raise ElfError(f"run kind is {run_s.kind!r}; `elf train` trains kind 'train' runs only")
    if emb_s.kind == "learned":
        raise ElfError("embedding kind 'learned' is trained jointly with the flow and is not "
                       "implemented yet (see README, 'Status')")
    store = open_store(args.store)
    tokenizer = load_tokenizer(args.tokenizer)
    try:
        cfg = model_config(run_s.model.size, sizes, d=store.dim, vocab_size=len(tokenizer),
                           max_length=store.seq_len, bottleneck=run_s.model.bottleneck,
                           conditioning=run_s.model.conditioning, decode_head=run_s.model.decode_head)
    except KeyError as err:
        raise ElfError(str(err)) from err
    rank, world_size, device = init_distributed()
    torch.manual_seed(run_s.budget.seed)  # model initialisation
    model = ELF(cfg)
    b = run_s.budget
    batches = ShuffledBatches(store, b.batch_size // b.grad_accum, seed=b.seed, rank=rank,
                              world_size=world_size, normalization=emb_s.normalization,
                              mean=emb_s.mean, std=emb_s.std)
    meta = model_meta(cfg, run=to_dict(run_s), dataset=to_dict(data_s), embedding=to_dict(emb_s),
                      store=str(args.store), tokenizer=str(args.tokenizer),
                      store_identity=store.attrs.get("identity_hash"),
                      normalization_stats=store.stats, num_parameters=sum(
                          p.numel() for p in model.parameters()))
    train(model, run_s, batches, args.out, meta,
          loss_covers_padding=data_s.task != "unconditional", seq_shape=(store.seq_len, store.dim),
          rank=rank, world_size=world_size, device=device, progress=not args.no_progress)
    batches.close()
