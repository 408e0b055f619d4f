"""Benchmark: training batches from a Zarr embedding store vs encoding them on the fly, and store writing.

Builds a random T5 encoder from a config (no download), random token rows, writes a store with the real
writer (elf/embed/store.py) into a temporary folder, then times ``ShuffledBatches`` (elf/embed/reader.py)
over three sources. Prints one table and the projected size of the OpenWebText store (spec §2: 9e9 tokens x
512 dims x 2 bytes). Nothing is kept.

    python benchmarks/bench_store.py                       # small CPU run
    python benchmarks/bench_store.py --seq-len 1024 --d-model 512 --layers 6 --heads 8 --d-ff 2048 \
        --num-sequences 2048 --batch-size 64 --device cuda  # t5-small shape
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import zarr
from transformers import T5Config, T5EncoderModel

from elf.embed.kinds import ContextualEncoder
from elf.embed.reader import OnTheFlySource, ShuffledBatches, StoreSource
from elf.embed.store import (TokenArrays, create_store, finalize_store, human_bytes, plan_layout,
                             write_blocks)

OWT_TOKENS, T5_SMALL_DIM = 9e9, 512


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-sequences", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--d-model", type=int, default=64, help="encoder width = embedding width d")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32, help="training batch (sequences)")
    p.add_argument("--batches", type=int, default=20, help="batches timed per reader")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--chunk-sequences", type=int, help="store chunk size (default: the store's own)")
    p.add_argument("--block-sequences", type=int, help="store shard size (default: the store's own)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch intra-op threads (1 avoids OpenMP contention on a "
                   "busy small machine)")
    return p.parse_args()


def random_encoder(args) -> ContextualEncoder:
    torch.manual_seed(args.seed)
    config = T5Config(vocab_size=args.vocab_size, d_model=args.d_model, d_kv=args.d_model // args.heads,
                      d_ff=args.d_ff, num_layers=args.layers, num_heads=args.heads)
    return ContextualEncoder(T5EncoderModel(config)).to(args.device)


def random_tokens(args) -> dict:
    rng = np.random.default_rng(args.seed)
    shape = (args.num_sequences, args.seq_len)
    return {"input_ids": rng.integers(2, args.vocab_size, size=shape), "attention_mask": np.ones(shape, np.int64),
            "cond_seq_mask": np.zeros(shape, np.int64)}


def time_reader(batches: ShuffledBatches, n: int, device: str) -> float:
    """Seconds per batch over n batches after one warm-up batch (prefetch off: the reader's own cost)."""
    next(batches)
    start = time.perf_counter()
    for _ in range(n):
        batch = next(batches)
        batch["x"].to(device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokens = TokenArrays(random_tokens(args))
    embedder = random_encoder(args)
    layout = plan_layout(len(tokens), args.seq_len, args.d_model, args.dtype, False,
                         chunk_sequences=args.chunk_sequences, block_sequences=args.block_sequences)
    rows = []  # (what, sequences/s, tokens/s, MiB/s of embeddings)
    mib_per_seq = layout.sequence_bytes / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.zarr"
        create_store(path, layout, {"benchmark": True})
        start = time.perf_counter()
        write_blocks(path, tokens, embedder, batch_size=args.batch_size, device=args.device, progress=False)
        finalize_store(path, progress=False)
        seconds = time.perf_counter() - start
        rows.append(("store write, encode + write + finalize", len(tokens) / seconds))

        stored = StoreSource(path, in_memory=True).store.read_rows(0, len(tokens))
        stored["block_stats"] = zarr.open_group(str(path), mode="r")["block_stats"][:]
        paths = {True: path}
        for sharded in (True, False):  # the same arrays again, without the encoder: zarr I/O alone
            layout_io = dataclasses.replace(layout, sharded=sharded)
            paths[sharded] = Path(tmp) / f"io-{sharded}.zarr"
            group = create_store(paths[sharded], layout_io, {"benchmark": "io"})
            start = time.perf_counter()
            for name, values in stored.items():
                group[name][:] = values
            finalize_store(paths[sharded], progress=False)
            rows.append((f"store write, zarr I/O only ({'sharded' if sharded else 'unsharded'})",
                         len(tokens) / (time.perf_counter() - start)))

        readers = {
            "train batches: store, zarr reads (sharded)": StoreSource(paths[True], in_memory=False),
            "train batches: store, zarr reads (unsharded)": StoreSource(paths[False], in_memory=False),
            "train batches: store, zarr reads, tokens in RAM": StoreSource(  # the default for big stores
                paths[True], memory_limit=layout.num_sequences * layout.seq_len * 6),
            "train batches: store, in memory": StoreSource(path, in_memory=True),
            "train batches: encode on the fly": OnTheFlySource(tokens, embedder, device=args.device),
        }
        for what, source in readers.items():
            batches = ShuffledBatches(source, args.batch_size, seed=args.seed, prefetch=0)
            rows.append((what, args.batch_size / time_reader(batches, args.batches, args.device)))

    print(f"\nELF store benchmark: {args.num_sequences} sequences x {args.seq_len} tokens, d={args.d_model} "
          f"({args.layers}-layer random T5 encoder, d_ff {args.d_ff}), {args.dtype}, batch {args.batch_size}, "
          f"device {args.device}, {torch.get_num_threads()} threads")
    print(f"store layout: {layout.describe()}\n")
    print(f"| {'what':47s} | {'sequences/s':>12s} | {'tokens/s':>12s} | {'MiB/s':>9s} |")
    print(f"|{'-' * 49}|{'-' * 14}|{'-' * 14}|{'-' * 11}|")
    for what, seq_per_s in rows:
        print(f"| {what:47s} | {seq_per_s:12,.0f} | {seq_per_s * args.seq_len:12,.0f} | "
              f"{seq_per_s * mib_per_seq:9,.1f} |")
    owt = OWT_TOKENS * T5_SMALL_DIM * 2
    print(f"\nprojected OWT store: {OWT_TOKENS:.0e} tokens x {T5_SMALL_DIM} dims x 2 bytes = {human_bytes(owt)} "
          f"({owt / 1e12:.1f} TB) of embeddings, plus {human_bytes(OWT_TOKENS * 6)} of token arrays")


if __name__ == "__main__":
    main()
