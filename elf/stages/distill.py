r"""``elf distill``: one progressive-distillation round (spec §7, ELF+PD) → a student checkpoint.

Reads the frozen teacher's checkpoint (``--teacher``, its EMA weights), the student's initialisation
(``--init``: the teacher for round 1, the previous round's run directory after; its EMA weights), the
dataset's train-split embedding store and the tokenizer (checked against the vocabulary). Trains the
student with ``elf.flow.distill.distill_step`` inside the training loop (``elf.train.loop.train``: the
same resume, DDP, EMA, clipping, logging and checkpoint machinery as ``elf train``) and writes into
``--out`` the usual run directory (``{ema,model}.safetensors``, ``config.json``, ``train_log.jsonl``,
``resume/`` while running) plus ``tokens.json``: the training tokens of this round
(steps × batch × L) and of the whole chain behind it (teacher + every round so far; paper Fig. 9b).

    elf distill --settings "$(cat pd_r2.json)" \
        --teacher results/runs/base --init results/runs/pd_r1 \
        --store results/embeddings/owt/encoder/train.zarr --tokenizer results/models/tokenizer \
        --out results/runs/pd_r2

The ``distill`` rule (workflow/rules/distill.smk) runs it with the run's resolved settings.
``--settings`` is the train stage's JSON (keys run, dataset, embedding, sizes, precision); the run must
be of kind ``distill`` with a ``distill`` section (student_steps, teacher_substeps). The student's
architecture is the init checkpoint's; the run's ``model`` settings must agree with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from elf.cli import ElfError
from elf.stages.train import add_device_arg, on_replicas

TOKENS_FILE = "tokens.json"


def register(sub) -> None:
    p = sub.add_parser("distill", help="one progressive-distillation round: teacher + init → student",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding, sizes, precision (run kind 'distill')")
    p.add_argument("--teacher", required=True, help="teacher run directory (frozen; EMA weights)")
    p.add_argument("--init", required=True,
                   help="run directory whose EMA weights initialise the student (round 1: the teacher)")
    p.add_argument("--store", required=True, help="train-split embedding store (.zarr)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary check)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arg(p)
    p.set_defaults(func=run)


# --------------------------------------------------------------------------------------------------
# Checks and records (no torch needed; unit-tested)
# --------------------------------------------------------------------------------------------------

def run_tokens(meta: dict) -> int | None:
    """Training tokens of a finished run from its ``config.json``: steps × batch × L (None if unknown)."""
    budget = (meta.get("run") or {}).get("budget")
    length = (meta.get("model") or {}).get("max_length")
    if not budget or not length:
        return None
    return int(budget["steps"]) * int(budget["batch_size"]) * int(length)


def token_record(run_name: str, run_settings: dict, seq_len: int, teacher_meta: dict,
                 init_record: dict | None) -> dict:
    """``tokens.json`` of a finished round. ``init_record``: the init run's ``tokens.json`` when the
    init is itself a distillation round (None when it is the teacher or another trained run)."""
    budget, distill = run_settings["budget"], run_settings["distill"]
    tokens = int(budget["steps"]) * int(budget["batch_size"]) * int(seq_len)
    before = init_record or {}
    distill_total = int(before.get("distill_tokens_total", 0)) + tokens
    teacher_tokens = run_tokens(teacher_meta)
    total = None if teacher_tokens is None else teacher_tokens + distill_total
    return dict(
        run=run_name, kind="distill", round=int(before.get("round", 0)) + 1,
        student_steps=distill["student_steps"], teacher_substeps=distill["teacher_substeps"],
        steps=int(budget["steps"]), batch_size=int(budget["batch_size"]), seq_len=int(seq_len),
        tokens_seen=tokens,
        rounds=[*before.get("rounds", []), dict(run=run_name, tokens_seen=tokens)],
        distill_tokens_total=distill_total,
        teacher=run_settings.get("teacher"), teacher_tokens_seen=teacher_tokens,
        total_tokens_seen=total,
        ratio_to_teacher=None if not teacher_tokens else total / teacher_tokens,
    )


def check_compatible(name: str, meta: dict, *, d: int, seq_len: int, vocab: int,
                     embedding: dict, model_settings: dict | None = None) -> None:
    """Refuse a checkpoint that cannot denoise this store's embeddings (clear ElfError)."""
    model = meta["model"]
    if model["d"] != d or model["max_length"] != seq_len:
        raise ElfError(f"--{name}: checkpoint has d={model['d']}, L={model['max_length']}; the store "
                       f"has d={d}, L={seq_len}")
    if model.get("decode_head", True) and model["vocab_size"] != vocab:
        raise ElfError(f"--{name}: checkpoint vocabulary {model['vocab_size']} != tokenizer's {vocab}")
    if "embedding" in meta and meta["embedding"] != embedding:
        raise ElfError(f"--{name}: checkpoint was trained on embedding settings {meta['embedding']}, "
                       f"this run uses {embedding}")
    trained = (meta.get("run") or {}).get("model")
    if model_settings is not None and trained is not None and trained != model_settings:
        diff = sorted(k for k in model_settings if trained.get(k) != model_settings[k])
        raise ElfError(f"--{name}: the run's model settings differ from the checkpoint's in "
                       f"{', '.join(diff)}: the student keeps the init checkpoint's network")


def _prediction(meta: dict) -> str:
    return ((meta.get("run") or {}).get("model") or {}).get("prediction", "x")


def _load(path: str, what: str):
    from elf.train.checkpoint import load_model
    try:
        return load_model(Path(path), "ema")
    except ElfError as err:
        raise ElfError(f"--{what}: {err}") from err


def _init_record(init_dir: Path, init_meta: dict) -> dict | None:
    from elf.artifacts import read_json
    if (init_meta.get("run") or {}).get("kind") != "distill":
        return None
    path = init_dir / TOKENS_FILE
    if not path.exists():
        raise ElfError(f"--init {init_dir} is a distillation round without {TOKENS_FILE}; rerun its "
                       "distill rule")
    return read_json(path)


# --------------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------------

def run(args) -> None:
    on_replicas(_run, args)


def _run(args) -> None:
    import torch

    from elf.artifacts import check_tokenizer, tokenizer_sha256
    from elf.config import to_dict
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import ShuffledBatches
    from elf.embed.store import open_store
    from elf.flow.distill import distill_step, draw_distill_step
    from elf.io import output_lock, write_json
    from elf.stages.train import parse_precision, parse_train_settings
    from elf.train.checkpoint import checkpoint_sha256, model_meta
    from elf.train.loop import init_distributed, train

    run_s, data_s, emb_s, _ = parse_train_settings(args.settings)
    precision = parse_precision(args.settings)
    if run_s.kind != "distill" or run_s.distill is None:
        raise ElfError(f"run kind is {run_s.kind!r}; `elf distill` needs a kind 'distill' run with a "
                       "`distill` section")
    if not getattr(emb_s, "cache", True):
        raise ElfError("distillation reads a cached embedding store; the run's embedding has "
                       "cache: false")
    store = open_store(args.store)
    vocab = len(load_tokenizer(args.tokenizer))
    check_tokenizer(args.tokenizer, (store.attrs.get("identity") or {}).get("tokenizer"),
                    f"store {args.store}")
    rank, world_size, device = init_distributed(args.device)
    teacher, teacher_meta = _load(args.teacher, "teacher")
    student, init_meta = _load(args.init, "init")
    shape = dict(d=store.dim, seq_len=store.seq_len, vocab=vocab, embedding=to_dict(emb_s))
    check_compatible("teacher", teacher_meta, **shape)
    check_compatible("init", init_meta, **shape, model_settings=to_dict(run_s.model))
    init_record = _init_record(Path(args.init), init_meta)
    teacher.requires_grad_(False).eval().to(device)
    student.train()

    b = run_s.budget
    batches = ShuffledBatches(store, b.batch_size // b.grad_accum, seed=b.seed, rank=rank,
                              world_size=world_size, normalization=emb_s.normalization,
                              mean=emb_s.mean, std=emb_s.std)
    meta = model_meta(student.cfg, run=to_dict(run_s), dataset=to_dict(data_s),
                      embedding=to_dict(emb_s), store=str(args.store), tokenizer=str(args.tokenizer),
                      tokenizer_sha256=tokenizer_sha256(args.tokenizer),
                      store_identity=store.attrs.get("identity_sha256"),
                      normalization_stats=store.stats, precision=precision,
                      num_parameters=student.num_parameters(),
                      teacher=str(args.teacher), teacher_sha256=checkpoint_sha256(Path(args.teacher)),
                      init=str(args.init), init_sha256=checkpoint_sha256(Path(args.init)))
    objective, rounds = run_s.objective, run_s.distill
    static = device.type == "xla"
    teacher_forward = torch.compile(teacher) if b.compile and not static else teacher
    covers_padding = data_s.task != "unconditional"

    def draw_fn(global_shape, generator):
        return draw_distill_step(global_shape, objective, rounds, generator)

    def step_fn(net, batch, draws, denominator):  # per-example loss: the global row count normalises
        return distill_step(net, teacher_forward, batch, draws, objective,
                            student_prediction=run_s.model.prediction,
                            teacher_prediction=_prediction(teacher_meta),
                            loss_covers_padding=covers_padding, batch_rows=b.batch_size,
                            static_shapes=static)

    with output_lock(args.out, enabled=rank == 0):
        train(student, run_s, batches, args.out, meta, loss_covers_padding=covers_padding,
              seq_shape=(store.seq_len, store.dim), rank=rank, world_size=world_size, device=device,
              progress=not args.no_progress, draw_fn=draw_fn, step_fn=step_fn, precision=precision)
        batches.close()
        if rank == 0:
            write_json(Path(args.out) / TOKENS_FILE, token_record(
                Path(args.out).name, to_dict(run_s), store.seq_len, teacher_meta, init_record))
