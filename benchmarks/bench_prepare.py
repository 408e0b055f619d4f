"""Benchmark: ``elf prepare`` throughput with 1 vs N processes on the same shards (elf/stages/prepare.py).

Writes a synthetic unconditional corpus (random words from a seeded generator, documents of random
length) as a local ``.jsonl`` file, trains a small tokenizer on it, then runs the prepare stage once per
process count with the same ``prepare_shards`` (so the outputs must be byte-identical: checked), and
prints one table: documents, tokens, seconds and tokens per second side by side. Nothing is kept.

    python benchmarks/bench_prepare.py                          # 1 vs 2 processes, small CPU run
    python benchmarks/bench_prepare.py --docs 200000 --procs 1 8 --shards 16
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from elf.data.tokenizer import train_tokenizer
from elf.artifacts import read_json
from elf.stages import prepare


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=20000, help="documents in the synthetic corpus")
    p.add_argument("--mean-words", type=int, default=150, help="mean words per document")
    p.add_argument("--shards", type=int, default=4, help="prepare_shards (same for every run)")
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2], help="process counts to compare")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--vocab-size", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def synthetic_corpus(docs: int, mean_words: int, seed: int) -> list[str]:
    """Documents of random words (Zipf-like word frequencies), deterministic for a seed."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(5000)]
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    lengths = rng.poisson(mean_words, size=docs) + 1
    picks = rng.choice(len(words), size=int(lengths.sum()), p=weights)
    out, start = [], 0
    for n in lengths:
        out.append(" ".join(words[i] for i in picks[start:start + n]))
        start += n
    return out


def run_prepare(corpus: Path, tokenizer: Path, out: Path, shards: int, procs: int, max_length: int) -> float:
    settings = {"task": "unconditional", "source": "local", "name": str(corpus), "max_length": max_length,
                "prepare_shards": shards}
    parser = argparse.ArgumentParser()
    prepare.register(parser.add_subparsers())
    args = parser.parse_args(["prepare", "--settings", json.dumps(settings), "--tokenizer", str(tokenizer),
                              "--carve-docs", "100", "--num-proc", str(procs), "--out", str(out)])
    start = time.perf_counter()
    args.func(args)
    return time.perf_counter() - start


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        texts = synthetic_corpus(args.docs, args.mean_words, args.seed)
        corpus = tmp / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        train_tokenizer(texts[:2000], args.vocab_size).save_pretrained(str(tmp / "tokenizer"))
        results = []
        for procs in args.procs:
            seconds = run_prepare(corpus, tmp / "tokenizer", tmp / f"out{procs}", args.shards, procs,
                                  args.max_length)
            record = read_json(tmp / f"out{procs}" / "provenance.json")
            tokens = sum(s["tokens_in"] for s in record["shards"].values())
            results.append((procs, seconds, tokens))
        first = tmp / f"out{args.procs[0]}" / "train" / "data-00000-of-00001.arrow"
        same = all((tmp / f"out{p}" / "train" / "data-00000-of-00001.arrow").read_bytes() == first.read_bytes()
                   for p in args.procs)
    print(f"\nelf prepare: {args.docs:,} documents, {results[0][2]:,} tokens (+EOS), {args.shards} train "
          f"shards, L = {args.max_length}; outputs byte-identical across process counts: {same}\n")
    print("| processes | seconds | tokens/s | speed-up |")
    print("|---:|---:|---:|---:|")
    for procs, seconds, tokens in results:
        print(f"| {procs} | {seconds:.1f} | {tokens / seconds:,.0f} | {results[0][1] / seconds:.2f}x |")


if __name__ == "__main__":
    main()
