r"""``elf sample``: a run's checkpoint (EMA weights) + a named sampler setting + seeds → samples JSONL.

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
The batches themselves are ``elf.flow.sampling``'s; this stage loads the inputs and writes the files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from elf.artifacts import layout
from elf.artifacts.names import PROVENANCE, RUN_DATASET, RUN_MODEL, RUN_SETTINGS
from elf.errors import ElfError
from elf.config import PRECISIONS, SamplerSettings
from elf.stages.args import parse_settings, resolve_device


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


def parse_sampler(text: str) -> SamplerSettings:
    return parse_settings(text, SamplerSettings, "sampler", "--sampler")


def register(sub) -> None:
    p = sub.add_parser("sample", help="sample one run with one sampler setting, for one or more seeds",
                       description=__doc__)
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


def check_sampling(seeds: list[int], batch_size: int, n: int) -> None:
    """Distinct seeds >= 0, a batch of at least one sample, n >= 0 (0: every conditional example)."""
    if len(set(seeds)) != len(seeds):
        raise ElfError(f"--seed: a seed is given twice ({seeds})")
    if batch_size < 1 or n < 0 or min(seeds) < 0:
        raise ElfError(f"--batch-size {batch_size}, --n {n}, --seed {seeds}: allowed "
                       "--batch-size >= 1, --n >= 0 (0: every conditional example), seeds >= 0")


def run(args) -> None:
    from elf.io import output_lock

    check_sampling(args.seed, args.batch_size, args.n)
    if args.out and len(args.seed) != 1:
        raise ElfError(f"--out holds one seed; for {len(args.seed)} seeds pass --out-dir")
    settings = parse_sampler(args.sampler)
    with output_lock(args.out or args.out_dir):
        job, fields = load_job(
            Path(args.checkpoint), settings, tokenizer_ref=args.tokenizer,
            device=resolve_device(args.device), asked_precision=args.precision, n=args.n,
            store=args.store, tokens=args.tokens, split=args.split, decoder_dir=args.decoder)
        fields.update(run=args.run_name or Path(args.checkpoint).name, sampler=args.sampler_name,
                      batch_size=args.batch_size)
        sample = dict(job=job, fields=fields, batch_size=args.batch_size, progress=not args.no_progress)
        if args.out:
            sample_seed(**sample, seed=args.seed[0], out=Path(args.out))
        else:
            sample_seeds(**sample, seeds=args.seed, out_dir=Path(args.out_dir))


def header_of(fields: dict, seed: int) -> dict:
    """The provenance header of one seed's samples file."""
    from elf.artifacts.records import samples_header
    from elf.io import provenance

    return provenance(**samples_header(**fields, seed=seed))


def sample_seeds(job, fields: dict, batch_size: int, progress: bool, seeds: list[int],
                 out_dir: Path) -> None:
    """Every seed into ``out_dir/seed<k>.jsonl``, built in ``<out_dir>.partial/`` and moved into place."""
    import os

    staging = out_dir.with_name(out_dir.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    wanted = {layout.seed_file(staging, seed, layout.SAMPLES_SUFFIX) for seed in seeds}
    for seed in seeds:
        final = layout.seed_file(staging, seed, layout.SAMPLES_SUFFIX)
        header = header_of(fields, seed)
        done = out_dir / final.name  # a previous complete run's file, e.g. before a seed was added
        if not _finished(final, header) and _finished(done, header):
            shutil.copyfile(done, final)
        if not _finished(final, header):
            sample_seed(job, fields, batch_size, progress, seed, final,
                        partial=final.with_name(final.name + ".partial"))
    for stray in set(staging.iterdir()) - wanted:
        stray.unlink()  # seeds no longer asked for
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(staging, out_dir)


def _finished(path: Path, header: dict) -> bool:
    """A complete seed file from an interrupted multi-seed run, with the same inputs and settings."""
    from elf.artifacts.records import SamplesFormatError, read_samples, same_sample_inputs

    if not path.exists():
        return False
    try:
        old, rows = read_samples(path)
    except SamplesFormatError:
        return False
    return same_sample_inputs(old, header) and len(rows) == header["n"]


def sample_seed(job, fields: dict, batch_size: int, progress: bool, seed: int, out: Path,
                partial: Path | None = None) -> None:
    """One seed into ``out``, resuming from the whole batches in ``partial`` (``<out>.partial``),
    which is removed at the end."""
    from tqdm import tqdm

    from elf.artifacts.records import same_sample_inputs, write_samples
    from elf.flow.sampling import sample_rows
    from elf.io import append_jsonl, resume_jsonl, rewrite_jsonl

    partial = partial or Path(f"{out}.partial")
    header = header_of(fields, seed)
    rows = resume_jsonl(partial, lambda first: same_sample_inputs(first.get(PROVENANCE) or {}, header))
    done = len(rows) // batch_size
    rows = rows[:done * batch_size]
    rewrite_jsonl(partial, {PROVENANCE: header}, rows)
    bar = tqdm(total=job.n, initial=len(rows), desc=f"sample seed {seed}", unit="sample",
               disable=not progress)
    for batch in sample_rows(job, seed, batch_size, start_batch=done):
        append_jsonl(partial, batch)
        rows += batch
        bar.update(len(batch))
    bar.close()
    write_samples(out, header, rows)
    partial.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------
# Loading the inputs
# --------------------------------------------------------------------------------------------------

def load_checkpoint(checkpoint: Path, tokenizer_ref: str, device):
    """The EMA network of a run directory, its record, and the tokenizer, checked to be the one the
    run was trained with: the one loader of ``elf sample``, ``elf evaluate`` and ``elf trajectory``."""
    from elf.artifacts import check_tokenizer
    from elf.artifacts.names import RUN_TOKENIZER, TOKENIZER_SHA256
    from elf.data.tokenizer import load_tokenizer
    from elf.train.checkpoint import load_model

    try:
        model, meta = load_model(checkpoint, "ema", device)
    except FileNotFoundError as err:
        raise ElfError(str(err)) from err
    tokenizer = load_tokenizer(tokenizer_ref)
    check_tokenizer(tokenizer_ref, {"name_or_path": meta.get(RUN_TOKENIZER),
                                    TOKENIZER_SHA256: meta.get(TOKENIZER_SHA256)},
                    f"checkpoint {checkpoint}")
    return model, meta, tokenizer


def load_job(checkpoint: Path, settings: SamplerSettings, *, tokenizer_ref: str, device,
             asked_precision: str | None, n: int, store: str | None = None, tokens: str | None = None,
             split: str | None = None, decoder_dir: str | None = None):
    """The ``SamplingJob`` of one (checkpoint, sampler) and the samples-header fields it decides."""
    from elf.config import DatasetSettings, from_dict, to_dict
    from elf.flow.sampling import SamplingJob, rollout_precision
    from elf.io import sha256_json
    from elf.train.checkpoint import checkpoint_sha256

    model, meta, tokenizer = load_checkpoint(checkpoint, tokenizer_ref, device)
    decoder, decoder_sha256 = separate_decoder(meta, decoder_dir, checkpoint, device)
    dataset = meta[RUN_DATASET]
    check_sampler_against(meta, settings, checkpoint, n)
    rows = None
    if dataset["task"] != "unconditional":
        rows = conditional_inputs(meta, store=store, tokens=tokens, split=split, tokenizer_ref=tokenizer_ref)
        n = min(len(rows["input_ids"]), n) if n else len(rows["input_ids"])
    precision = rollout_precision(asked_precision, settings, meta)
    model_cfg = meta[RUN_MODEL]
    # the target positions the layout leaves (config-checked against `target_length`)
    target = from_dict(DatasetSettings, dataset, "checkpoint dataset").target_tokens if rows else None
    job = SamplingJob(model, settings, tokenizer, device, precision,
                      prediction=meta[RUN_SETTINGS]["model"]["prediction"],
                      seq_shape=(model_cfg["max_length"], model_cfg["d"]), n=n, source_rows=rows,
                      target_tokens=target, decoder=decoder)
    fields = dict(checkpoint=str(checkpoint), checkpoint_sha256=checkpoint_sha256(checkpoint),
                  run_config_sha256=sha256_json(meta[RUN_SETTINGS]), sampler_settings=to_dict(settings),
                  precision=precision, n=n, task=dataset["task"], eval_store=store, eval_tokens=tokens,
                  eval_split=rows["split"] if rows else None,
                  eval_store_identity=rows["store_identity"] if rows else None,
                  decoder=decoder_dir, decoder_sha256=decoder_sha256,
                  max_tokens=target if target is not None else model_cfg["max_length"])
    return job, fields


def check_sampler_against(meta: dict, settings: SamplerSettings, checkpoint: Path, n: int) -> None:
    """The rules plan time applies to a (run, sampler) pair (``elf.settings_checks``), here against
    the checkpoint's own record: no setting the method ignores, SC-CFG within the trained range,
    input CFG only with a source; and at least one sample of an unconditional run."""
    from elf.config import ObjectiveSettings, from_dict
    from elf.settings_checks import check_sampler, check_sampler_for_run
    from elf.stages.args import refused_as

    task = meta[RUN_DATASET]["task"]
    if task == "unconditional" and n < 1:
        raise ElfError(f"--n {n}: an unconditional run draws --n samples; allowed: --n >= 1 (0 means "
                       "every example of a conditional split only)")
    with refused_as("--sampler"):
        check_sampler("sampler", settings)
        objective = (meta.get(RUN_SETTINGS) or {}).get("objective")
        if isinstance(objective, dict):
            check_sampler_for_run("sampler", settings,
                                  from_dict(ObjectiveSettings, objective, "checkpoint objective"), task,
                                  f"--checkpoint {checkpoint} holds a run")


def separate_decoder(meta: dict, decoder_dir: str | None, checkpoint: Path, device):
    """The run's separate decoder (and its weights' sha256), or (None, None) for a shared one."""
    from elf.artifacts import verified_sha256
    from elf.artifacts.names import DECODER_WEIGHTS, RUN_EMBEDDING
    from elf.train.checkpoint import load_decoder

    named = meta[RUN_SETTINGS].get("decoder")
    if not named and not decoder_dir:
        if not meta[RUN_MODEL].get("decode_head", True):
            raise ElfError(f"{checkpoint}: the network has no decode head and its run names no "
                           "decoder")
        return None, None
    if not decoder_dir:
        raise ElfError(f"run decodes with the separate decoder '{named}': pass --decoder")
    if not named:
        raise ElfError(f"--decoder given but the run of {checkpoint} names no decoder")
    decoder, dmeta = load_decoder(decoder_dir, device)
    if dmeta[RUN_EMBEDDING] != meta[RUN_EMBEDDING] or dmeta["decoder"]["d"] != meta[RUN_MODEL]["d"]:
        raise ElfError(f"--decoder {decoder_dir} was trained on embedding {dmeta[RUN_EMBEDDING]} "
                       f"but the run uses {meta[RUN_EMBEDDING]}")
    return decoder, verified_sha256(Path(decoder_dir) / DECODER_WEIGHTS)


def conditional_inputs(meta: dict, *, store: str | None, tokens: str | None, split: str | None,
                       tokenizer_ref: str) -> dict:
    """Clean source embeddings (normalised as in training), masks, source text and reference, all
    of the store's split."""
    import numpy as np
    import torch

    from elf.artifacts import check_tokenizer
    from elf.artifacts.names import RUN_EMBEDDING, STORE_SOURCE, STORE_TOKENIZER
    from elf.embed.normalise import normalise
    from elf.embed.store import from_storage, open_store

    if not store or not tokens:
        raise ElfError("a conditional run needs --store (evaluation split) and --tokens")
    opened = open_store(store)
    identity = opened.identity
    check_tokenizer(tokenizer_ref, identity.get(STORE_TOKENIZER), f"store {store}")
    split = _store_split(opened, identity, split)
    rows = opened.read_rows(0, len(opened))
    emb = from_storage(rows["embeddings"], opened.dtype)
    e = meta[RUN_EMBEDDING]
    x = normalise(emb, opened.stats, e["normalization"], e["mean"], e["std"]).float()
    packed = _packed_split(tokens, split)
    if len(packed) != len(opened) or not np.array_equal(np.asarray(packed["input_ids"]),
                                                        np.asarray(rows["input_ids"])):
        raise ElfError(f"--tokens {tokens} split {split!r} ({len(packed)} rows) is not the "
                       f"token data of --store {store} ({len(opened)} rows, made from "
                       f"{identity.get(STORE_SOURCE, {}).get('tokens')}): sources and references "
                       "would not pair with the stored embeddings; pass the tokens the store was "
                       "embedded from")
    return dict(split=split, store_identity=opened.identity_sha256,
                input_ids=torch.as_tensor(np.asarray(rows["input_ids"]), dtype=torch.long),
                cond_seq_mask=torch.as_tensor(np.asarray(rows["cond_seq_mask"])) > 0, x=x,
                source_length=torch.as_tensor(np.asarray(packed["source_length"])),
                source_text=list(packed["source_text"]), reference=list(packed["reference"]))


def _store_split(store, identity: dict, asked: str | None) -> str:
    """The split an evaluation store holds (its identity); ``--split`` may only repeat it."""
    from elf.artifacts.names import STORE_SOURCE

    held = identity.get(STORE_SOURCE, {}).get("split")
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
