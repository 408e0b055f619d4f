r"""``elf embed``: one split of packed tokens -> its Zarr embedding store (spec §2, §8).

Reads ``--tokens`` (the ``elf prepare`` DatasetDict and its provenance.json) and the encoder at
``--encoder``; writes ``--out``, a store laid out as ``elf/embed/store.py`` describes (embeddings in
``EmbeddingSettings.dtype``, normalisation statistics over valid tokens, checksum, completion marker).

    elf embed --settings '{"kind": "encoder", "dtype": "float16"}' --encoder results/encoders/main \
        --tokens results/data/owt --split train --out results/embeddings/owt/encoder/train.zarr

A killed run, rerun with the same arguments, continues from the blocks already written. On a cluster,
n jobs ``... --shard k --num-shards n`` (k = 0..n-1) write disjoint blocks of one store (whichever starts
first creates it), then ``elf embed --finalize --out STORE --num-shards n`` checks every block is there
(else names the shard jobs that did not finish) and writes the statistics, the token-id checksum and the
completion marker. Without ``--shard`` one call does it all. Every call prints the size of the store it
will produce before writing.

``--work PATH`` builds the store at PATH and renames it to ``--out`` once complete (by the single call,
or by ``--finalize``). The Snakemake rules use it (``workflow/rules/embed.smk``): Snakemake deletes a
failed job's output, but not the work store, so a killed job's retry resumes from its written blocks.

    elf embed ... --work W.zarr --out train.zarr --shard 0 --num-shards 2   # and --shard 1: any order
    elf embed --finalize --work W.zarr --out train.zarr --num-shards 2      # W.zarr -> train.zarr

Kind ``learned`` is refused: it is trained with the flow, so training embeds it on the fly.
"""

from __future__ import annotations

import os
from pathlib import Path

from elf.artifacts.names import (ENCODER_WEIGHT_FILES, ENCODER_WEIGHTS_SHA256, PROVENANCE, STORE_ENCODER,
                                 STORE_SOURCE, STORE_TOKENIZER, TOKENIZER_SHA256)
from elf.errors import ElfError
from elf.config import EmbeddingSettings, to_dict
from elf.io import provenance, sha256_json
from elf.artifacts import file_sha256
from elf.stages.args import parse_settings, resolve_device

# Only these settings change the stored values; normalisation is applied when reading.
CONTENT_SETTINGS = ("kind", "encoder", "dtype")


def register(subparsers) -> None:
    parser = subparsers.add_parser("embed", help="cache the clean embeddings of one split in a Zarr store",
                                   description=__doc__)
    parser.add_argument("--settings", help="EmbeddingSettings as JSON")
    parser.add_argument("--encoder", help="encoder folder or hub id (also sets the width of table kinds)")
    parser.add_argument("--tokens", help="packed-token DatasetDict folder (elf prepare --out)")
    parser.add_argument("--split", help="split to embed: train, validation or test")
    parser.add_argument("--out", required=True, help="the store to write, e.g. results/embeddings/D/E/train.zarr")
    parser.add_argument("--work", help="build the store here, rename it to --out when complete (resumable "
                        "even where a failed job's --out is deleted)")
    parser.add_argument("--shard", type=int, help="write only blocks with index %% num-shards == shard")
    parser.add_argument("--num-shards", type=int, help="number of --shard jobs writing this store")
    parser.add_argument("--finalize", action="store_true",
                        help="after all --shard jobs: check, write statistics, checksum and marker")
    parser.add_argument("--batch-size", type=int, default=64, help="sequences per encoder call")
    parser.add_argument("--device", default="cpu",
                        help="cpu, cuda, xla, or auto ($ELF_DEVICE if set, else cuda when available)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the gaussian kind's table")
    parser.add_argument("--vocab-size", type=int,
                        help="rows of the embedding table (default: the encoder config's vocab_size)")
    parser.add_argument("--tokenizer", help="tokenizer identity to record (default: from the tokens' "
                        "provenance.json)")
    parser.add_argument("--chunk-sequences", type=int, help="sequences per zarr chunk (default ~1 MiB)")
    parser.add_argument("--block-sequences", type=int,
                        help="sequences per shard file = resume unit (default ~256 MiB)")
    parser.add_argument("--no-sharding", action="store_true",
                        help="plain chunk files instead of zarr shards (cheaper reads, many more files)")
    parser.set_defaults(func=run)


def run(args) -> None:
    if args.finalize:
        finish(args.work, args.out, args.num_shards)
        return
    missing = [f"--{name}" for name in ("settings", "encoder", "tokens", "split") if getattr(args, name) is None]
    if missing:
        raise ElfError(f"missing {', '.join(missing)} (only --finalize runs without them)")
    if (args.shard is None) != (args.num_shards is None):
        raise ElfError("--shard and --num-shards go together (--finalize takes --num-shards alone)")
    settings = parse_settings(args.settings, EmbeddingSettings)
    if settings.kind == "learned":
        raise ElfError("embedding kind 'learned' cannot be cached: its table is trained with the flow, "
                       "so training embeds on the fly; there is no store to write for it")
    written = embed_split(settings, encoder=args.encoder, tokens_dir=args.tokens, split=args.split,
                          store=args.work or args.out, tokenizer=args.tokenizer, seed=args.seed,
                          vocab_size=args.vocab_size, batch_size=args.batch_size,
                          device=resolve_device(args.device),
                          shard=args.shard, num_shards=args.num_shards,
                          layout_options=dict(chunk_sequences=args.chunk_sequences,
                                              block_sequences=args.block_sequences,
                                              sharded=not args.no_sharding), shown_as=args.out)
    if args.shard is not None:
        work = f" --work {args.work}" if args.work else ""
        print(f"elf embed: shard {args.shard}/{args.num_shards} wrote {written} blocks; after every shard, "
              f"run `elf embed --finalize{work} --out {args.out} --num-shards {args.num_shards}`")
        return
    finish(args.work, args.out, args.num_shards)


def embed_split(settings: EmbeddingSettings, *, encoder: str, tokens_dir: str, split: str, store: str,
                tokenizer: str | None, seed: int, vocab_size: int | None, batch_size: int, device,
                shard: int | None, num_shards: int | None, layout_options: dict, shown_as: str) -> int:
    """Create (or reopen) the store and write its blocks (those of ``shard``); returns how many."""
    # zarr / torch are imported here, not at module level, so `elf --help` stays fast
    from elf.embed.store import TokenArrays, create_store, plan_layout, write_blocks

    tokens = TokenArrays.from_disk(tokens_dir, split)
    encoder_id = encoder_identity(encoder)
    vocab_size = vocab_size or encoder_id.get("vocab_size")
    if vocab_size is None:
        raise ElfError(f"cannot read vocab_size from encoder {encoder!r}: pass --vocab-size")
    embedder = _build_embedder(settings, encoder, vocab_size, seed)
    layout = plan_layout(len(tokens), tokens.seq_len, embedder.dim, settings.dtype, tokens.conditional,
                         **layout_options)
    print(f"elf embed: {shown_as}: {layout.describe()}", flush=True)
    identity = {"settings": {k: to_dict(settings)[k] for k in CONTENT_SETTINGS},
                STORE_ENCODER: encoder_id, "vocab_size": vocab_size, "seed": seed,
                STORE_TOKENIZER: tokenizer_identity(tokenizer, tokens_dir),
                STORE_SOURCE: {"tokens": str(tokens_dir), "split": split, **tokens.fingerprint()}}
    create_store(store, layout, identity,
                 extra_attrs={"settings": to_dict(settings), PROVENANCE: provenance()})
    return write_blocks(store, tokens, embedder, batch_size=batch_size, device=device,
                        shard=shard or 0, num_shards=num_shards or 1)


def finish(work: str | None, out: str, num_shards: int | None) -> None:
    """Finalize the store (at ``work`` if given, then renamed to ``out``) and print its statistics."""
    from elf.embed.store import finalize_store, open_store

    if work and not Path(work).exists() and Path(out).exists():
        stats = open_store(out).stats  # finished by an earlier call: nothing left to do
    else:
        stats = finalize_store(work or out, num_shards=num_shards)
        if work:
            if Path(out).exists():
                raise ElfError(f"--out {out} already exists; delete it to replace it by the "
                               f"finished store at --work {work}")
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            os.rename(work, out)  # same file system: atomic
    _report(out, stats)


def _build_embedder(settings: EmbeddingSettings, encoder: str, vocab_size: int, seed: int):
    from elf.embed.kinds import build_embedder  # transformers import only when embedding

    try:
        embedder = build_embedder(settings, encoder, vocab_size, seed=seed)
    except (OSError, ValueError) as err:
        raise ElfError(f"--encoder {encoder!r}: {err}") from err
    if not getattr(embedder, "cacheable", True):
        raise ElfError(f"embedding kind {settings.kind!r} is not cacheable: training embeds on the fly")
    return embedder


def encoder_identity(name_or_path: str) -> dict:
    """Name/path, config hash and vocab size, plus the weights' sha256 for a local folder."""
    from elf.hub import pretrained_kwargs

    identity: dict = {"name_or_path": str(name_or_path)}
    name, kwargs = pretrained_kwargs(str(name_or_path), "--encoder")
    identity.update(kwargs)  # the pinned revision, when there is one
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(name, **kwargs).to_dict()
    except (OSError, ValueError):
        return identity
    for volatile in ("transformers_version", "_name_or_path"):
        config.pop(volatile, None)
    identity.update(config_sha256=sha256_json(config), vocab_size=config.get("vocab_size"))
    for weights in ENCODER_WEIGHT_FILES:
        if (Path(name_or_path) / weights).is_file():
            identity[ENCODER_WEIGHTS_SHA256] = file_sha256(Path(name_or_path) / weights)
            break
    return identity


def tokenizer_identity(tokenizer: str | None, tokens_dir: str) -> dict:
    """The tokenizer named on the command line, else the one the tokens' provenance.json records."""
    from elf.artifacts import tokenizer_sha256, tokens_tokenizer

    if tokenizer is None:
        return tokens_tokenizer(tokens_dir)
    identity = {"name_or_path": tokenizer}
    if tokenizer_sha256(tokenizer):
        identity[TOKENIZER_SHA256] = tokenizer_sha256(tokenizer)
    return identity


def _report(out: str, stats: dict) -> None:
    print(f"elf embed: {out} complete: {stats['count']:,} valid tokens, mean {stats['scalar_mean']:.4f}, "
          f"std {stats['scalar_std']:.4f}")
