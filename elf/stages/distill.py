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

from pathlib import Path

from elf.artifacts.names import RUN_EMBEDDING, RUN_MODEL, RUN_SETTINGS, TOKENS_FILE
from elf.artifacts.records import token_record
from elf.errors import ElfError
from elf.stages.args import TrainSettings, device_errors, parse_train_settings
from elf.stages.train import add_device_arg, check_batch_fits


def register(sub) -> None:
    p = sub.add_parser("distill", help="one progressive-distillation round: teacher + init → student",
                       description=__doc__)
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

def check_compatible(name: str, meta: dict, *, d: int, seq_len: int, vocab: int,
                     embedding: dict, model_settings: dict | None = None) -> None:
    """Refuse a checkpoint that cannot denoise this store's embeddings (clear ElfError)."""
    model = meta[RUN_MODEL]
    if model["d"] != d or model["max_length"] != seq_len:
        raise ElfError(f"--{name}: checkpoint has d={model['d']}, L={model['max_length']}; the store "
                       f"has d={d}, L={seq_len}")
    if model.get("decode_head", True) and model["vocab_size"] != vocab:
        raise ElfError(f"--{name}: checkpoint vocabulary {model['vocab_size']} != tokenizer's {vocab}")
    if RUN_EMBEDDING in meta and meta[RUN_EMBEDDING] != embedding:
        raise ElfError(f"--{name}: checkpoint was trained on embedding settings {meta[RUN_EMBEDDING]}, "
                       f"this run uses {embedding}")
    trained = (meta.get(RUN_SETTINGS) or {}).get("model")
    if model_settings is not None and trained is not None and trained != model_settings:
        diff = sorted(k for k in model_settings if trained.get(k) != model_settings[k])
        raise ElfError(f"--{name}: the run's model settings differ from the checkpoint's in "
                       f"{', '.join(diff)}: the student keeps the init checkpoint's network")


def _prediction(meta: dict) -> str:
    return ((meta.get(RUN_SETTINGS) or {}).get("model") or {}).get("prediction", "x")


def _load(path: Path, what: str):
    from elf.train.checkpoint import load_model
    try:
        return load_model(path, "ema")
    except ElfError as err:
        raise ElfError(f"--{what}: {err}") from err


def _init_record(init_dir: Path, init_meta: dict) -> dict | None:
    from elf.artifacts import read_json
    if (init_meta.get(RUN_SETTINGS) or {}).get("kind") != "distill":
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
    with device_errors(args.device):
        _run(args)


def _run(args) -> None:
    distill_round(parse_train_settings(args.settings), teacher=Path(args.teacher), init=Path(args.init),
                  store_path=args.store, tokenizer_ref=args.tokenizer, out=Path(args.out),
                  progress=not args.no_progress, device_name=args.device)


def distill_round(settings: TrainSettings, *, teacher: Path, init: Path, store_path: str,
                  tokenizer_ref: str, out: Path, progress: bool, device_name: str = "auto") -> None:
    """Load the teacher and the student's init, train the student, write its run directory and
    ``tokens.json``."""
    import torch

    from elf.artifacts import check_tokenizer, tokenizer_sha256
    from elf.artifacts.checks import check_same_dataset, check_store_for_run
    from elf.artifacts.names import (RUN_DATASET, RUN_PARAMETERS, RUN_PRECISION, RUN_STATS, RUN_STORE,
                                     RUN_STORE_IDENTITY, RUN_TOKENIZER, RUN_TRAIN_ROWS, STORE_TOKENIZER,
                                     TOKENIZER_SHA256)
    from elf.config import SCHEDULING_FIELDS, to_dict
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import ShuffledBatches
    from elf.embed.store import open_store
    from elf.flow.distill import distill_step, draw_distill_step
    from elf.io import output_lock, write_json
    from elf.train.checkpoint import checkpoint_sha256, model_meta
    from elf.train.loop import init_distributed, train

    run_s, data_s, emb_s, precision = settings.run, settings.dataset, settings.embedding, settings.precision
    if run_s.kind != "distill" or run_s.distill is None:
        raise ElfError(f"run kind is {run_s.kind!r}; `elf distill` needs a kind 'distill' run with a "
                       "`distill` section")
    if not getattr(emb_s, "cache", True):
        raise ElfError("distillation reads a cached embedding store; the run's embedding has "
                       "cache: false")
    rank, world_size, device = init_distributed(device_name)  # an unusable --device fails first
    store = open_store(store_path)
    vocab = len(load_tokenizer(tokenizer_ref))
    check_tokenizer(tokenizer_ref, store.identity.get(STORE_TOKENIZER), f"store {store_path}")
    teacher_net, teacher_meta = _load(teacher, "teacher")
    student, init_meta = _load(init, "init")
    shape = dict(d=store.dim, seq_len=store.seq_len, vocab=vocab, embedding=to_dict(emb_s))
    check_compatible("teacher", teacher_meta, **shape)
    check_same_dataset("--teacher", teacher_meta, to_dict(data_s), ignore=SCHEDULING_FIELDS)
    check_compatible("init", init_meta, **shape, model_settings=to_dict(run_s.model))
    check_same_dataset("--init", init_meta, to_dict(data_s), ignore=SCHEDULING_FIELDS)
    check_store_for_run(store_path, conditional=store.conditional, seq_len=store.seq_len,
                        identity=store.identity, dataset=to_dict(data_s), embedding=to_dict(emb_s))
    check_batch_fits(run_s, len(store), f"--store {store_path}")
    init_record = _init_record(init, init_meta)
    teacher_net.requires_grad_(False).eval().to(device)
    student.train()

    b = run_s.budget
    batches = ShuffledBatches(store, b.batch_size // b.grad_accum, seed=b.seed, rank=rank,
                              world_size=world_size, normalization=emb_s.normalization,
                              mean=emb_s.mean, std=emb_s.std)
    meta = model_meta(student.cfg, **{
        RUN_SETTINGS: to_dict(run_s), RUN_DATASET: to_dict(data_s), RUN_EMBEDDING: to_dict(emb_s),
        RUN_STORE: str(store_path), RUN_TOKENIZER: str(tokenizer_ref),
        TOKENIZER_SHA256: tokenizer_sha256(tokenizer_ref), RUN_STORE_IDENTITY: store.identity_sha256,
        RUN_STATS: store.stats, RUN_PRECISION: precision, RUN_PARAMETERS: student.num_parameters(),
        RUN_TRAIN_ROWS: store.layout.num_sequences,
        "teacher": str(teacher), "teacher_sha256": checkpoint_sha256(teacher),
        "init": str(init), "init_sha256": checkpoint_sha256(init)})
    objective, rounds = run_s.objective, run_s.distill
    static = device.type == "xla"
    teacher_forward = torch.compile(teacher_net) if b.compile and not static else teacher_net
    covers_padding = data_s.task != "unconditional"

    def draw_fn(global_shape, generator):
        return draw_distill_step(global_shape, objective, rounds, generator)

    def step_fn(net, batch, draws, denominator):  # per-example loss: the global row count normalises
        return distill_step(net, teacher_forward, batch, draws, objective,
                            student_prediction=run_s.model.prediction,
                            teacher_prediction=_prediction(teacher_meta),
                            loss_covers_padding=covers_padding, batch_rows=b.batch_size,
                            static_shapes=static)

    with output_lock(out, enabled=rank == 0):
        train(student, run_s, batches, out, meta, loss_covers_padding=covers_padding,
              seq_shape=(store.seq_len, store.dim), rank=rank, world_size=world_size, device=device,
              progress=progress, draw_fn=draw_fn, step_fn=step_fn, precision=precision)
        batches.close()
        if rank == 0:
            write_json(out / TOKENS_FILE, token_record(out.name, to_dict(run_s), store.seq_len,
                                                       teacher_meta, init_record))
