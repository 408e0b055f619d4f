"""``elf sample``: a run's checkpoint (EMA weights) + a named sampler setting + seeds → samples JSONL.

The file's first line is a provenance header (checkpoint sha256, run config hash = ``sha256_json`` of
the checkpoint config's ``run``, sampler settings, seed, code version); each further line is one
sample (text, token ids; for conditional tasks the source and the reference). Batch ``k`` draws its
noise from a generator seeded by (seed, k), so the same seed gives the same samples and an
interrupted run resumes from the batches already written (``<out>.partial``):

    elf sample --checkpoint results/runs/base --sampler '{"method": "sde", "steps": 32, ...}' \
        --sampler-name sde32 --seed 0 --n 64 --tokenizer results/models/tokenizer --out s.jsonl

Several seeds share one process (the checkpoint is loaded once): ``--seed 0 1 2 --out-dir DIR`` writes
``DIR/seed<k>.jsonl`` for each, building them in ``DIR.partial/`` (finished seeds and the batches of
the current one survive a kill and are reused) and moving that folder onto ``DIR`` at the end.
Conditional tasks add ``--store <test split .zarr> --tokens <packed dataset dir>``: sources and
references both come from the store's split (``--split``, if given, must be it), and the packed
split's token ids must equal the store's row by row, so a sample is never scored against another
example's reference. The checkpoint's weights are verified against its ``checksums.json`` and the
tokenizer against the one the checkpoint (and a conditional store) was made with
(``elf.artifacts``); ``<out>.lock`` keeps a second sampler of the same output off. A run trained
without a decode head names a separate decoder (Fig. 5b); pass its directory with ``--decoder``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from elf.cli import ElfError, resolve_device
from elf.config import PRECISIONS


def add_rollout_args(p) -> None:
    """The arguments every rollout stage reads (``sample``, ``trajectory``)."""
    p.add_argument("--checkpoint", required=True, help="run directory (config.json + ema.safetensors)")
    p.add_argument("--sampler", required=True, help="SamplerSettings as JSON")
    p.add_argument("--sampler-name", default="custom", help="the sampler's name in the config")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (detokenisation)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="precision policy (elf/precision.py); default: the checkpoint's (its "
                   "config.json `precision`, fp32 if none). A sampler setting with precision fp32 "
                   "overrides it")


def rollout_precision(args, settings, meta: dict) -> str:
    """The precision a rollout runs in: fp32 if the sampler setting says so, else ``--precision``,
    else the policy the checkpoint was trained under."""
    if settings.precision == "fp32":
        return "fp32"
    return args.precision or meta.get("precision", "fp32")


def register(sub) -> None:
    p = sub.add_parser("sample", help="sample one run with one sampler setting, for one or more seeds",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_rollout_args(p)
    p.add_argument("--run-name", default=None, help="the run's name in the config")
    p.add_argument("--seed", type=int, nargs="+", required=True,
                   help="evaluation seed(s); several need --out-dir")
    p.add_argument("--n", type=int, required=True, help="samples (unconditional) or examples (0 = all)")
    p.add_argument("--batch-size", type=int, default=64, help="samples per batch")
    p.add_argument("--store", help="conditional: the evaluation split's embedding store")
    p.add_argument("--tokens", help="conditional: packed dataset dir (source text, reference)")
    p.add_argument("--split", default=None,
                   help="conditional: the split sampled; default and only allowed value: --store's")
    p.add_argument("--decoder", help="separate decoder dir (`elf decoder`), for runs that name one")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="samples file (.jsonl) of the one --seed")
    out.add_argument("--out-dir", help="folder of seed<k>.jsonl, one per --seed")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def parse_sampler_settings(text: str):
    """``--sampler`` JSON → SamplerSettings, or an ElfError naming the bad key."""
    from elf.config import ConfigError, SamplerSettings, from_dict
    try:
        return from_dict(SamplerSettings, json.loads(text), "sampler")
    except (json.JSONDecodeError, ConfigError) as err:
        raise ElfError(f"--sampler: {err}") from err


def batch_generator(seed: int, batch: int):
    import torch
    return torch.Generator().manual_seed(seed * 1_000_003 + batch)


def run(args) -> None:
    if len(set(args.seed)) != len(args.seed):
        raise ElfError(f"--seed: a seed is given twice ({args.seed})")
    if args.out and len(args.seed) != 1:
        raise ElfError(f"--out holds one seed; for {len(args.seed)} seeds pass --out-dir")
    if args.batch_size < 1 or args.n < 0 or min(args.seed) < 0:
        raise ElfError(f"--batch-size {args.batch_size}, --n {args.n}, --seed {args.seed}: allowed "
                       "--batch-size >= 1, --n >= 0 (0: every conditional example), seeds >= 0")
    from elf.io import output_lock

    with output_lock(args.out or args.out_dir):
        _run(args)


def _run(args) -> None:
    job = _load_job(args)
    if args.out:
        _sample_seed(job, args, job.header(args.seed[0]), Path(args.out),
                     Path(str(args.out) + ".partial"))
        return
    out_dir = Path(args.out_dir)
    staging = out_dir.with_name(out_dir.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    for seed in args.seed:
        final, header = staging / f"seed{seed}.jsonl", job.header(seed)
        done = out_dir / final.name  # a previous complete run's file, e.g. before a seed was added
        if not _finished(final, header) and _finished(done, header):
            shutil.copyfile(done, final)
        if not _finished(final, header):
            _sample_seed(job, args, header, final, staging / f"seed{seed}.jsonl.partial")
    for stray in set(staging.iterdir()) - {staging / f"seed{seed}.jsonl" for seed in args.seed}:
        stray.unlink()  # seeds no longer asked for
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(staging, out_dir)


class _Job:
    """What every seed of one (checkpoint, sampler) shares: loaded once per process."""

    def __init__(self, args, settings, model, meta, decoder, decoder_sha256, tokenizer, source_rows,
                 device, checkpoint_sha256):
        from elf.config import to_dict
        from elf.io import sha256_json

        self.settings, self.model, self.meta, self.device = settings, model, meta, device
        self.decoder, self.tokenizer, self.source_rows = decoder, tokenizer, source_rows
        self.precision = rollout_precision(args, settings, meta)
        conditional = source_rows is not None
        n = len(source_rows["input_ids"]) if conditional else args.n
        self.n = min(n, args.n) if conditional and args.n else n
        self._fields = dict(
            checkpoint=str(args.checkpoint), checkpoint_sha256=checkpoint_sha256,
            run=args.run_name or Path(args.checkpoint).name,
            run_config_sha256=sha256_json(meta["run"]), sampler=args.sampler_name,
            sampler_settings=to_dict(settings), precision=self.precision, n=self.n,
            batch_size=args.batch_size, task=meta["dataset"]["task"], eval_store=args.store,
            eval_tokens=args.tokens,
            eval_split=source_rows["split"] if conditional else None,
            eval_store_identity=source_rows["store_identity"] if conditional else None,
            decoder=args.decoder, decoder_sha256=decoder_sha256)

    def header(self, seed: int) -> dict:
        """The provenance header of one seed's samples file."""
        from elf.io import provenance

        return provenance(**self._fields, seed=seed)


def _load_job(args) -> _Job:
    from elf.artifacts import check_tokenizer
    from elf.data.tokenizer import load_tokenizer
    from elf.train.checkpoint import checkpoint_sha256, load_model

    settings = parse_sampler_settings(args.sampler)
    device = resolve_device(args.device)
    model, meta = load_model(Path(args.checkpoint), "ema", device)
    decoder, decoder_sha256 = _separate_decoder(args, meta, device)
    tokenizer = load_tokenizer(args.tokenizer)
    check_tokenizer(args.tokenizer, {"name_or_path": meta.get("tokenizer"),
                                     "tokenizer_sha256": meta.get("tokenizer_sha256")},
                    f"checkpoint {args.checkpoint}")
    conditional = meta["dataset"]["task"] != "unconditional"
    source_rows = _conditional_inputs(args, meta) if conditional else None
    return _Job(args, settings, model, meta, decoder, decoder_sha256, tokenizer, source_rows, device,
                checkpoint_sha256(Path(args.checkpoint)))


def _finished(path: Path, header: dict) -> bool:
    """A complete seed file from an interrupted multi-seed run, with the same inputs and settings."""
    from elf.artifacts.records import SamplesFormatError, read_samples

    if not path.exists():
        return False
    try:
        old, rows = read_samples(path)
    except SamplesFormatError:
        return False
    return _same_inputs(old, header) and len(rows) == header["n"]


def _sample_seed(job: _Job, args, header: dict, out: Path, partial: Path) -> None:
    """Sample the seed of ``header`` into ``out``, resuming from (and then removing) ``partial``."""
    from tqdm import tqdm

    from elf.artifacts.records import write_samples

    seed = header["seed"]
    rows = _resume(partial, header)
    L, d = job.meta["model"]["max_length"], job.meta["model"]["d"]
    starts = list(range(0, job.n, args.batch_size))
    done = len(rows) // args.batch_size if rows else 0
    rows = rows[:done * args.batch_size]
    _rewrite_partial(partial, header, rows)
    bar = tqdm(total=job.n, initial=len(rows), desc=f"sample seed {seed}", unit="sample",
               disable=args.no_progress)
    for k in range(done, len(starts)):
        lo, hi = starts[k], min(starts[k] + args.batch_size, job.n)
        batch_rows = _sample_batch(job.model, job.meta, job.settings, job.tokenizer, lo, hi, L, d,
                                   job.device, batch_generator(seed, k), job.source_rows, job.decoder,
                                   job.precision)
        with open(partial, "a") as fh:
            for row in batch_rows:
                fh.write(json.dumps(row) + "\n")
        rows += batch_rows
        bar.update(hi - lo)
    bar.close()
    write_samples(out, header, rows)
    partial.unlink(missing_ok=True)


def _separate_decoder(args, meta, device):
    """The run's separate decoder (and its weights' sha256), or (None, None) for a shared one."""
    from elf.artifacts import verified_sha256
    from elf.stages.decoder import load_decoder

    named = meta["run"].get("decoder")
    if not named and not args.decoder:
        if not meta["model"].get("decode_head", True):
            raise ElfError(f"{args.checkpoint}: the network has no decode head and its run names no "
                           "decoder")
        return None, None
    if not args.decoder:
        raise ElfError(f"run decodes with the separate decoder '{named}': pass --decoder")
    if not named:
        raise ElfError(f"--decoder given but the run of {args.checkpoint} names no decoder")
    decoder, dmeta = load_decoder(args.decoder, device)
    if dmeta["embedding"] != meta["embedding"] or dmeta["decoder"]["d"] != meta["model"]["d"]:
        raise ElfError(f"--decoder {args.decoder} was trained on embedding {dmeta['embedding']} "
                       f"but the run uses {meta['embedding']}")
    return decoder, verified_sha256(Path(args.decoder) / "model.safetensors")


def _conditional_inputs(args, meta) -> dict:
    """Clean source embeddings (normalised as in training), masks, source text and reference, all
    of the store's split."""
    import numpy as np
    import torch

    from elf.artifacts import check_tokenizer
    from elf.embed.kinds import normalise
    from elf.embed.store import from_storage, open_store

    if not args.store or not args.tokens:
        raise ElfError("a conditional run needs --store (evaluation split) and --tokens")
    store = open_store(args.store)
    identity = store.attrs.get("identity") or {}
    check_tokenizer(args.tokenizer, identity.get("tokenizer"), f"store {args.store}")
    split = _store_split(store, identity, args.split)
    rows = store.read_rows(0, len(store))
    emb = from_storage(rows["embeddings"], store.dtype)
    e = meta["embedding"]
    x = normalise(emb, store.stats, e["normalization"], e["mean"], e["std"]).float()
    packed = _packed_split(args.tokens, split)
    if len(packed) != len(store) or not np.array_equal(np.asarray(packed["input_ids"]),
                                                       np.asarray(rows["input_ids"])):
        raise ElfError(f"--tokens {args.tokens} split {split!r} ({len(packed)} rows) is not the "
                       f"token data of --store {args.store} ({len(store)} rows, made from "
                       f"{identity.get('source', {}).get('tokens')}): sources and references "
                       "would not pair with the stored embeddings; pass the tokens the store was "
                       "embedded from")
    return dict(split=split, store_identity=store.attrs.get("identity_sha256"),
                input_ids=torch.as_tensor(np.asarray(rows["input_ids"]), dtype=torch.long),
                cond_seq_mask=torch.as_tensor(np.asarray(rows["cond_seq_mask"])) > 0, x=x,
                source_length=torch.as_tensor(np.asarray(packed["source_length"])),
                source_text=list(packed["source_text"]), reference=list(packed["reference"]))


def _store_split(store, identity: dict, asked: str | None) -> str:
    """The split an evaluation store holds (its identity); ``--split`` may only repeat it."""
    held = identity.get("source", {}).get("split")
    if asked is not None and held is not None and asked != held:
        raise ElfError(f"--split {asked!r}, but --store {store.path} holds split {held!r}: sources and "
                       "references come from the store's split; pass the store of the split to sample")
    return held or asked or "test"


def _packed_split(tokens: str, split: str):
    import datasets

    try:
        splits = datasets.load_from_disk(str(tokens))
    except (FileNotFoundError, ValueError) as err:
        raise ElfError(f"--tokens {tokens}: not a saved token dataset ({err})") from err
    if split not in splits:
        raise ElfError(f"--tokens {tokens} has no split {split!r} (has {list(splits)})")
    return splits[split]


def _sample_batch(model, meta, s, tokenizer, lo, hi, L, d, device, generator, source_rows,
                  decoder=None, precision="fp32"):
    import torch

    from elf.flow.samplers import Source, decode_final, postprocess, rollout
    from elf.precision import network_autocast

    B = hi - lo
    z_init = (s.noise_scale * torch.randn(B, L, d, generator=generator)).to(device)
    source = None
    if source_rows is not None:
        source = Source(source_rows["cond_seq_mask"][lo:hi].to(device),
                        source_rows["x"][lo:hi].to(device))
    with torch.no_grad(), network_autocast(device, precision):
        z, _ = rollout(model, s, z_init, generator, source=source,
                       prediction=meta["run"]["model"]["prediction"])
        ids = decode_final(model, z, s.sc_cfg, decoder).argmax(-1).cpu()
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if source_rows is None:
        tokens = postprocess(ids, eos, pad)
    else:
        from elf.config import DatasetSettings, from_dict

        # the target positions the layout leaves (config-checked against `target_length`)
        target = from_dict(DatasetSettings, meta["dataset"], "checkpoint dataset").target_tokens
        tokens = postprocess(ids, eos, pad, source_length=source_rows["source_length"][lo:hi],
                             target_length=target)
    rows = []
    for i, seq in enumerate(tokens.tolist()):
        kept = seq[:seq.index(eos)] if eos in seq else seq
        kept = [t for t in kept if t != pad]
        row = dict(i=lo + i, text=tokenizer.decode(kept, skip_special_tokens=True), token_ids=kept)
        if source_rows is not None:
            row.update(source=source_rows["source_text"][lo + i],
                       reference=source_rows["reference"][lo + i])
        rows.append(row)
    return rows


def _resume(partial: Path, header: dict) -> list[dict]:
    """Rows of a previous interrupted run with the same checkpoint, sampler and seed."""
    if not partial.exists():
        return []
    lines = partial.read_text().splitlines()
    try:
        old = json.loads(lines[0])["provenance"]
    except (IndexError, json.JSONDecodeError, KeyError):
        return []
    if not _same_inputs(old, header):
        return []
    rows = []
    for line in lines[1:]:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by the kill
            break
    return rows


def _same_inputs(old: dict, header: dict) -> bool:
    # batch k's noise comes from generator (seed, k) in one draw of batch_size rows: rows written
    # with another batch size are other samples
    return all(old.get(k) == header[k] for k in ("checkpoint_sha256", "sampler_settings", "precision",
                                                  "seed", "n", "batch_size", "decoder_sha256"))


def _rewrite_partial(partial: Path, header: dict, rows: list[dict]) -> None:
    partial.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps({"provenance": header}) + "\n")
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    os.replace(tmp, partial)
