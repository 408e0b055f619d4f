r"""``elf evaluate``: one evaluation job — sample, score and aggregate several samplers of one run.

For each sampler of ``--plan`` it runs, in this one process, ``elf sample`` (every seed), ``elf score``
(one scorer load for the whole job) and ``elf aggregate`` (mean ± SE over the seeds), so the job pays
Python's start-up (torch, transformers) once instead of twice per sampler. The outputs are exactly
those stages' (``elf/plan.py`` gives the layout)::

    <out-dir>/samples/<sampler>/seed<k>.jsonl   <out-dir>/scores/<sampler>/seed<k>.json
    <out-dir>/aggregates/<sampler>.json

The folder is built in ``<out-dir>.partial/`` and moved into place at the end; after a kill a rerun
keeps every sampler already finished (a marker records its settings, seeds and checkpoint hash and the
sha256 of each file it wrote: a file damaged since is redone, never published) and the finished
seeds of the interrupted one (``elf sample``'s own resume).

``--plan`` is JSON: ``{"run": name, "task": ..., "n": samples or examples per seed, "batch_size",
"score_batch_size", "precision", "samplers": {name: {"settings": SamplerSettings, "seeds": [...],
"split": conditional split, "n": its examples per seed, else the plan's}}}`` (the workflow writes it from the config). Conditional runs also take
``--eval-data`` (folder of the ``<split>.zarr`` stores) and ``--tokens``:

    elf evaluate --plan "$PLAN" --checkpoint results/runs/base --tokenizer results/models/tokenizer \
        --scorer results/models/scorer --out-dir results/evals/base/all
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from elf.artifacts import layout
from elf.errors import ElfError
from elf.stages.args import resolve_device
from elf.io import atomic_dir, output_lock, write_json

DONE = "done"  # <staging>/done/<sampler>.json: a finished sampler's inputs and its files' sha256
MARKED = "files_sha256"  # the marker's record of the files it vouches for
STAGING = ".partial"  # <out-dir>.partial: the folder the job builds, moved onto <out-dir> at the end
PLAN_KEYS = ("run", "task", "n", "batch_size", "score_batch_size", "precision", "samplers")


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="sample, score and aggregate several samplers of one run",
                       description=__doc__)
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


@dataclass(frozen=True)
class EvalInputs:
    """The files one evaluation job reads (its command line, besides the plan)."""
    checkpoint: Path
    tokenizer: str
    scorer: str | None
    eval_data: str | None
    tokens: str | None
    decoder: str | None
    device: str
    progress: bool


def parse_plan(text: str) -> dict:
    try:
        plan = json.loads(text)
        for key in PLAN_KEYS:
            plan[key]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ElfError(f"--plan: not an evaluation plan ({err})") from err
    if not isinstance(plan["samplers"], dict) or not plan["samplers"]:
        raise ElfError("--plan: no samplers to evaluate")
    check_plan(plan)
    return plan


def check_plan(plan: dict) -> None:
    """The plan's settings by the rules plan time applies (``elf.settings_checks``), each refused in
    one line naming its key under --plan: the task, n, batch sizes, every sampler's settings and
    seeds (a sampler against the run's trained ranges: ``elf.stages.sample.load_job``)."""
    from typing import get_args, get_type_hints

    from elf.config import DatasetSettings, SamplerSettings
    from elf.settings_checks import check_sampler, check_seeds
    from elf.stages.args import refused_as, settings_of

    tasks = get_args(get_type_hints(DatasetSettings)["task"])
    if plan["task"] not in tasks:
        raise ElfError(f"--plan: config key 'task': got {plan['task']!r}; allowed: "
                       f"{', '.join(tasks)}")
    for key in ("n", "batch_size", "score_batch_size"):
        value, low = plan[key], 0 if key == "n" and plan["task"] != "unconditional" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ElfError(f"--plan: config key '{key}': got {value!r}; allowed: an integer >= {low}"
                           + (" (0: every conditional example)" if key == "n" else ""))
    for name, entry in plan["samplers"].items():
        key = f"samplers.{name}"
        if not isinstance(entry, dict) or "settings" not in entry or "seeds" not in entry:
            raise ElfError(f"--plan: config key '{key}': expected a mapping with settings and seeds")
        settings = settings_of(entry["settings"], SamplerSettings, f"{key}.settings", "--plan")
        seeds = entry["seeds"]
        if not isinstance(seeds, list) or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
            raise ElfError(f"--plan: config key '{key}.seeds': got {seeds!r}; expected a list of integers")
        n = entry.get("n", 0)
        if "n" in entry and (plan["task"] == "unconditional" or isinstance(n, bool)
                             or not isinstance(n, int) or n < 0):
            raise ElfError(f"--plan: config key '{key}.n': got {n!r}; allowed: an integer >= 0 on a "
                           "conditional task (0: every example)")
        with refused_as("--plan"):
            check_sampler(f"{key}.settings", settings)
            check_seeds(seeds, f"{key}.seeds")


def run(args) -> None:
    from elf.train.checkpoint import checkpoint_sha256

    plan = parse_plan(args.plan)
    if plan["task"] == "unconditional" and not args.scorer:
        raise ElfError("an unconditional run is scored by a scorer: pass --scorer")
    if plan["task"] != "unconditional" and not (args.eval_data and args.tokens):
        raise ElfError("a conditional run needs --eval-data and --tokens")
    inputs = EvalInputs(Path(args.checkpoint), args.tokenizer, args.scorer, args.eval_data, args.tokens,
                        args.decoder, args.device, not args.no_progress)
    try:
        ckpt_sha = checkpoint_sha256(inputs.checkpoint)
    except FileNotFoundError as err:
        raise ElfError(f"--checkpoint {args.checkpoint}: {err}") from err
    out = Path(args.out_dir)
    with output_lock(out):
        evaluate_all(inputs, plan, ckpt_sha, out)


def evaluate_all(inputs: EvalInputs, plan: dict, ckpt_sha: str, out: Path) -> None:
    """Every sampler of the plan into ``<out>.partial/`` (a finished one is kept, by its marker),
    then the folder moved onto ``out``."""
    staging = out.with_name(out.name + STAGING)
    for name, entry in plan["samplers"].items():
        marker = staging / DONE / f"{name}.json"
        done = {"checkpoint_sha256": ckpt_sha, **entry, **{k: plan[k] for k in plan if k != "samplers"}}
        if _still_done(marker, done, staging, name):
            continue
        evaluate_sampler(inputs, plan, name, entry, staging)
        write_json(marker, {**done, MARKED: outputs_sha256(staging, name)})
    _drop_strays(staging, set(plan["samplers"]))
    if out.exists():
        shutil.rmtree(out)
    shutil.rmtree(staging / DONE)
    os.replace(staging, out)


def outputs_sha256(staging: Path, name: str) -> dict[str, str]:
    """The sha256 of every file one sampler's evaluation wrote (samples, scores, aggregate), by path
    under the staging folder: what its done marker vouches for."""
    from elf.artifacts import file_sha256

    files = [p for folder in (layout.samples_dir(staging, name), layout.scores_dir(staging, name))
             for p in sorted(folder.glob("*")) if p.is_file()]
    files.append(layout.aggregate_file(staging, name))
    return {str(p.relative_to(staging)): file_sha256(p) for p in files if p.is_file()}


def _still_done(marker: Path, done: dict, staging: Path, name: str) -> bool:
    """A finished sampler is kept only if its marker records these inputs and its files are still
    the ones it marked; marked files that changed since (a damaged or cut file) are removed, so the
    sampler is redone and a damaged file is never published."""
    import sys

    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    marked = recorded.pop(MARKED, None) if isinstance(recorded, dict) else None
    if recorded != done:
        return False  # other inputs: redone (elf sample reuses the seeds that still fit)
    if marked == outputs_sha256(staging, name):
        return True
    print(f"elf evaluate: {marker}: the files it marks changed since they were written (damaged or "
          f"edited); evaluating sampler {name!r} again", file=sys.stderr)
    for folder in (layout.samples_dir(staging, name), layout.scores_dir(staging, name)):
        shutil.rmtree(folder, ignore_errors=True)
    layout.aggregate_file(staging, name).unlink(missing_ok=True)
    return False


def evaluate_sampler(inputs: EvalInputs, plan: dict, name: str, entry: dict, staging: Path) -> None:
    """Sample every seed of one sampler, score each seed's file, aggregate over the seeds. The files
    are written in ``staging`` and record each other by the paths they will have once it is moved
    into place (``<out>``), which the audit follows."""
    from elf.config import SamplerSettings
    from elf.stages.aggregate import aggregate_scores
    from elf.stages.args import settings_of
    from elf.stages.sample import check_sampling, load_job, sample_seeds
    from elf.stages.score import MAX_LENGTH, score_samples

    final = staging.with_name(staging.name.removesuffix(STAGING))
    seeds = [int(s) for s in entry["seeds"]]
    n = int(entry.get("n", plan["n"]))  # a conditional sampler may score the split's first n examples
    check_sampling(seeds, plan["batch_size"], n)
    conditional = plan["task"] != "unconditional"
    store = str(Path(inputs.eval_data) / f"{entry['split']}.zarr") if conditional else None
    settings = settings_of(entry["settings"], SamplerSettings, "sampler", "--plan")
    job, fields = load_job(inputs.checkpoint, settings, tokenizer_ref=inputs.tokenizer,
                           device=resolve_device(inputs.device), asked_precision=plan["precision"],
                           n=n, store=store, tokens=inputs.tokens if conditional else None,
                           split=entry["split"] if conditional else None, decoder_dir=inputs.decoder)
    fields.update(run=plan["run"], sampler=name, batch_size=plan["batch_size"])
    sample_seeds(job, fields, plan["batch_size"], inputs.progress, seeds, layout.samples_dir(staging, name))

    staged = f"{staging}={final}"  # the files record each other by the paths they will have
    samples = [str(layout.seed_file(layout.samples_dir(staging, name), s, layout.SAMPLES_SUFFIX))
               for s in seeds]
    records = score_samples(samples, task=plan["task"], run=plan["run"], sampler=name,
                            scorer_ref=inputs.scorer, device=inputs.device, precision=plan["precision"],
                            batch_size=plan["score_batch_size"], max_length=MAX_LENGTH, staged=staged)
    with atomic_dir(layout.scores_dir(staging, name)) as tmp:  # whole or not at all, as `elf score`
        for stem, record in records.items():
            write_json(tmp / f"{stem}{layout.SCORES_SUFFIX}", record)
    scores = [str(layout.seed_file(layout.scores_dir(staging, name), s, layout.SCORES_SUFFIX)) for s in seeds]
    write_json(layout.aggregate_file(staging, name), aggregate_scores(scores, plan["run"], name, staged))


def _drop_strays(staging: Path, samplers: set[str]) -> None:
    """Outputs of samplers no longer in the plan (an edited config) do not belong to this job, nor
    lock files (this job holds the lock of the whole folder)."""
    for kind in ("samples", "scores"):
        for path in (staging / kind).glob("*"):
            if path.suffix == ".lock" or path.is_file():
                path.unlink()
            elif path.name not in samplers:
                shutil.rmtree(path)
    for path in layout.aggregates_dir(staging).glob("*.json"):
        if path.stem not in samplers:
            path.unlink()
