"""``elf evaluate``: one evaluation job — sample, score and aggregate several samplers of one run.

For each sampler of ``--plan`` it runs, in this one process, ``elf sample`` (every seed), ``elf score``
(one scorer load for the whole job) and ``elf aggregate`` (mean ± SE over the seeds), so the job pays
Python's start-up (torch, transformers) once instead of twice per sampler. The outputs are exactly
those stages' (``elf/plan.py`` gives the layout)::

    <out-dir>/samples/<sampler>/seed<k>.jsonl   <out-dir>/scores/<sampler>/seed<k>.json
    <out-dir>/aggregates/<sampler>.json

The folder is built in ``<out-dir>.partial/`` and moved into place at the end; after a kill a rerun
keeps every sampler already finished (a marker records its settings, seeds and checkpoint hash) and
the finished seeds of the interrupted one (``elf sample``'s own resume).

``--plan`` is JSON: ``{"run": name, "task": ..., "n": samples or examples per seed, "batch_size",
"score_batch_size", "precision", "samplers": {name: {"settings": SamplerSettings, "seeds": [...],
"split": conditional split}}}`` (the workflow writes it from the config). Conditional runs also take
``--eval-data`` (folder of the ``<split>.zarr`` stores) and ``--tokens``:

    elf evaluate --plan "$PLAN" --checkpoint results/runs/base --tokenizer results/models/tokenizer \
        --scorer results/models/scorer --out-dir results/evals/base/all
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from elf.cli import ElfError, build_parser
from elf.io import output_lock

DONE = "done"  # <staging>/done/<sampler>.json: a finished sampler's inputs


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="sample, score and aggregate several samplers of one run",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", required=True, help="JSON: run, task, n, batch sizes, samplers (see above)")
    p.add_argument("--checkpoint", required=True, help="run directory (config.json + ema.safetensors)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id")
    p.add_argument("--scorer", help="unconditional: scorer folder or hub name")
    p.add_argument("--eval-data", help="conditional: folder holding <split>.zarr embedding stores")
    p.add_argument("--tokens", help="conditional: packed dataset dir (source text, references)")
    p.add_argument("--decoder", help="separate decoder dir, for runs that name one")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--out-dir", required=True, help="the evaluation folder to write")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def parse_plan(text: str) -> dict:
    try:
        plan = json.loads(text)
        for key in ("run", "task", "n", "batch_size", "score_batch_size", "precision", "samplers"):
            plan[key]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ElfError(f"--plan: not an evaluation plan ({err})") from err
    if not plan["samplers"]:
        raise ElfError("--plan: no samplers to evaluate")
    return plan


def run_stage(argv: list[str]) -> None:
    """Run one ``elf`` stage in this process (its ElfError propagates: the job stops, naming it)."""
    args = build_parser((argv[0],)).parse_args(argv)
    args.func(args)


def run(args) -> None:
    from elf.train.checkpoint import checkpoint_sha256

    plan = parse_plan(args.plan)
    if plan["task"] == "unconditional" and not args.scorer:
        raise ElfError("an unconditional run is scored by a scorer: pass --scorer")
    if plan["task"] != "unconditional" and not (args.eval_data and args.tokens):
        raise ElfError("a conditional run needs --eval-data and --tokens")
    try:
        ckpt_sha = checkpoint_sha256(Path(args.checkpoint))
    except FileNotFoundError as err:
        raise ElfError(f"--checkpoint {args.checkpoint}: {err}") from err
    out = Path(args.out_dir)
    with output_lock(out):
        _evaluate_all(args, plan, ckpt_sha, out)


def _evaluate_all(args, plan: dict, ckpt_sha: str, out: Path) -> None:
    staging = out.with_name(out.name + ".partial")
    for name, entry in plan["samplers"].items():
        marker = staging / DONE / f"{name}.json"
        inputs = {"checkpoint_sha256": ckpt_sha, **entry, **{k: plan[k] for k in plan if k != "samplers"}}
        if marker.exists() and json.loads(marker.read_text()) == inputs:
            continue
        evaluate_sampler(args, plan, name, entry, staging)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(inputs, sort_keys=True))
    _drop_strays(staging, set(plan["samplers"]))
    if out.exists():
        shutil.rmtree(out)
    shutil.rmtree(staging / DONE)
    os.replace(staging, out)


def evaluate_sampler(args, plan: dict, name: str, entry: dict, staging: Path) -> None:
    """Sample every seed of one sampler, score each seed's file, aggregate over the seeds."""
    seeds = [str(s) for s in entry["seeds"]]
    samples, scores = staging / "samples" / name, staging / "scores" / name
    common = ["--device", args.device, "--precision", plan["precision"]]
    sample = ["sample", "--checkpoint", args.checkpoint, "--sampler",
              json.dumps(entry["settings"]), "--sampler-name", name, "--run-name", plan["run"],
              "--seed", *seeds, "--n", str(plan["n"]), "--batch-size", str(plan["batch_size"]),
              "--tokenizer", args.tokenizer, "--out-dir", str(samples), *common]
    if plan["task"] != "unconditional":
        split = entry["split"]
        sample += ["--store", str(Path(args.eval_data) / f"{split}.zarr"), "--tokens", args.tokens,
                   "--split", split]
    if args.decoder:
        sample += ["--decoder", args.decoder]
    run_stage(sample + (["--no-progress"] if args.no_progress else []))
    files = [str(samples / f"seed{s}.jsonl") for s in seeds]
    staged = f"{staging}={args.out_dir}"  # the paths they will have once the folder moves into place
    score = ["score", "--samples", *files, "--task", plan["task"], "--run", plan["run"], "--sampler",
             name, "--batch-size", str(plan["score_batch_size"]), "--out-dir", str(scores),
             "--staged", staged, *common]
    run_stage(score + (["--scorer", args.scorer] if args.scorer else []))
    aggregate = staging / "aggregates" / f"{name}.json"
    run_stage(["aggregate", "--scores", *[str(scores / f"seed{s}.json") for s in seeds],
               "--run", plan["run"], "--sampler", name, "--out", str(aggregate), "--staged", staged])


def _drop_strays(staging: Path, samplers: set[str]) -> None:
    """Outputs of samplers no longer in the plan (an edited config) do not belong to this job, nor
    the stages' lock files (this job holds the lock of the whole folder)."""
    for kind in ("samples", "scores"):
        for path in (staging / kind).glob("*"):
            if path.suffix == ".lock" or path.is_file():
                path.unlink()
            elif path.name not in samplers:
                shutil.rmtree(path)
    for path in (staging / "aggregates").glob("*.json"):
        if path.stem not in samplers:
            path.unlink()
