"""Benchmark: today's code against a base commit's, side by side in one run (issue 20).

Worker processes importing ``elf`` from a snapshot of the base commit (``git archive`` into a
temporary folder; by default the commit before issue 20's speed work) or from this checkout, one
per code version and task (the pipeline trains and samples in separate processes), take turns:
every repeat measures each (shape, task) in both, in alternating order, so slow phases of a shared
machine hit both alike. Each measurement records wall-clock and CPU
time (the worker's process time: with one thread, the time it actually ran, which other jobs on a
shared machine do not inflate). The table's rates are medians over the repeats of CPU-time rates;
speed-up is the median of the per-repeat ratios base / new CPU time (range: smallest and largest),
``wall`` the same median for wall-clock time.

Tasks, at batch 8, d 64, bottleneck 32, fp32, on CPU:
- ``train``: optimiser steps of ``elf.train.loop.train`` itself on random in-memory batches
  (Muon + Nesterov-Adam, grad clip 1, EMA; default objective), timed from the end of the
  warm-up step to the end of the last; steps/s and tokens/s (B·L per step);
- ``sample``: what ``elf sample`` does per batch, without the text decode: 16-step SDE rollout
  (γ 1, SC-CFG 1) from a seeded ``z_init``, ``decode_final``, argmax, ``postprocess``; steps/s are
  sampler steps, tokens/s generated tokens (B·L per batch).
Shapes (depth × width, heads, length, vocabulary): ``SHAPES``.

    python benchmarks/speedup.py --threads 1                 # all shapes, both tasks, 5 repeats
    python benchmarks/speedup.py --threads 1 --shapes tiny --tasks train --repeats 9
    python benchmarks/speedup.py --base HEAD~3 --new-env ELF_MALLOC_TUNING=0   # another pair

Run from a clone of the repository (the base snapshot comes from its git history).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SHAPES = {  # name: (depth, width, heads, length, vocab)
    "tiny": (2, 128, 4, 64, 512),
    "small": (4, 256, 4, 128, 1024),
    "medium": (6, 384, 6, 256, 1024),
}
BATCH, D, BOTTLENECK = 8, 64, 32
SAMPLER = dict(method="sde", steps=16, gamma=1.0, sc_cfg=1.0)
REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--base", default="dc021f83c2e24c2fb06df8cdef9adcbbee44c909", help="git revision of the base code (default: the "
                   "commit before issue 20's speed work)")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    p.add_argument("--tasks", default="train,sample", help="train, sample")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--train-steps", type=int, default=0, help="timed steps per measurement "
                   "(default: per shape, about 2 s)")
    p.add_argument("--sample-batches", type=int, default=1, help="timed batches per measurement")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per worker")
    p.add_argument("--base-env", action="append", default=[], help="KEY=VALUE for the base worker")
    p.add_argument("--new-env", action="append", default=[], help="KEY=VALUE for the new worker")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------------
# Worker: imports whichever ``elf`` its PYTHONPATH holds; answers one JSON request per line.
# Only public API that the base commit has too.
# --------------------------------------------------------------------------------------------------

class RandomBatches:
    """A resumable source of a few fixed random batches, cycled."""

    def __init__(self, shape, seed: int = 0, count: int = 4):
        import torch

        depth, width, heads, L, vocab = shape
        g = torch.Generator().manual_seed(seed)
        self.batches = [dict(x=0.5 * torch.randn(BATCH, L, D, generator=g),
                             input_ids=torch.randint(3, vocab, (BATCH, L), generator=g),
                             attention_mask=torch.ones(BATCH, L, dtype=torch.long),
                             cond_seq_mask=torch.zeros(BATCH, L, dtype=torch.long))
                        for _ in range(count)]
        self.position = 0

    def __iter__(self):
        while True:
            self.position += 1
            yield self.batches[self.position % len(self.batches)]

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def build_model(shape, seed: int = 0):
    import torch

    from elf.model import ELF, model_config

    depth, width, heads, L, vocab = shape
    torch.manual_seed(seed)
    model = ELF(model_config("ELF-B", depth=depth, width=width, heads=heads, d=D,
                             bottleneck=BOTTLENECK, vocab_size=vocab, max_length=L))
    with torch.no_grad():  # a non-zero denoise head, so states move as in a trained model
        model.final_layer.linear.weight.normal_(0, 0.02)
    return model


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds: CPU time (this process, all threads) does not count the time the
    shared machine's other jobs hold the core."""
    return time.perf_counter(), time.process_time()


def per_unit(start, end, units: int) -> dict:
    return {"wall": (end[0] - start[0]) / units, "cpu": (end[1] - start[1]) / units}


def time_train(model, shape, steps: int, out_dir: Path) -> dict:
    """Wall and CPU seconds per optimiser step of ``train`` over ``steps`` steps after one warm-up."""
    from elf.config import BudgetSettings, RunSettings
    from elf.train.loop import train

    stamps = []
    total = steps + 1
    run = RunSettings(dataset="bench", budget=BudgetSettings(
        batch_size=BATCH, steps=total, log_every=total, checkpoint_every=10 * total))
    train(model, run, RandomBatches(shape), out_dir, {"bench": list(shape)},
          loss_covers_padding=False, seq_shape=(shape[3], D), progress=False,
          after_step=lambda: stamps.append(clocks()))
    return per_unit(stamps[0], stamps[-1], steps)


def time_sample(model, shape, batches: int, generator) -> dict:
    """Wall and CPU seconds per batch of what ``elf sample`` does, text decode aside."""
    import torch

    from elf.config import SamplerSettings
    from elf.flow.samplers import decode_final, postprocess, rollout
    from elf.precision import network_autocast

    s = SamplerSettings(**SAMPLER)
    L = shape[3]
    start = clocks()
    for _ in range(batches):
        z_init = s.noise_scale * torch.randn(BATCH, L, D, generator=generator)
        with torch.no_grad(), network_autocast("cpu", "fp32"):
            z, _ = rollout(model, s, z_init, generator, prediction="x")
            ids = decode_final(model, z, s.sc_cfg).argmax(-1)
        postprocess(ids, 1, 0)
    return per_unit(start, clocks(), batches)


def worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    models, warm = {}, set()
    generator = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for line in sys.stdin:
            req = json.loads(line)
            if req["task"] == "hello":
                import elf

                print(json.dumps({"elf": str(Path(elf.__file__).parent)}), flush=True)
                continue
            shape = tuple(req["shape"])
            key = (req["task"], shape)
            if key not in models:
                models[key] = build_model(shape)
                models[key].train(req["task"] == "train")
            model = models[key]
            if req["task"] == "train":
                seconds = time_train(model, shape, req["count"], Path(tmp) / "run")
            else:
                if key not in warm:
                    time_sample(model, shape, 1, generator)
                    warm.add(key)
                seconds = time_sample(model, shape, req["count"], generator)
            print(json.dumps({"seconds": seconds}), flush=True)


# --------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------

def resolve(rev: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", rev + "^{commit}"],
                          check=True, capture_output=True, text=True).stdout.strip()


def snapshot(commit: str, into: Path) -> Path:
    """The base commit's ``elf`` package, extracted under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "elf"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


class Worker:
    def __init__(self, label: str, tree: Path, threads: int, env: list[str]):
        self.label = label
        extra = dict(item.split("=", 1) for item in env)
        environ = {**os.environ, "PYTHONPATH": str(tree), **extra}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environ, cwd=tree)

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label} worker died (see its stderr above)")
        return json.loads(line)

    def measure(self, task: str, shape: tuple, count: int) -> dict:
        return self.ask(task=task, shape=shape, count=count)["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def default_train_steps(name: str) -> int:
    return {"tiny": 40, "small": 4, "medium": 2}.get(name, 2)


def rates(task: str, shape: tuple, seconds: float) -> tuple[float, float]:
    """(steps/s, tokens/s) of one measurement."""
    L = shape[3]
    if task == "train":
        return 1 / seconds, BATCH * L / seconds
    return SAMPLER["steps"] / seconds, BATCH * L / seconds


def print_table(results: dict) -> None:
    header = (f"{'task':>6}  {'shape':>22}  {'base steps/s':>12}  {'new steps/s':>11}  "
              f"{'base tok/s':>10}  {'new tok/s':>9}  {'speed-up':>8}  {'range':>11}  {'wall':>5}")
    print(header)
    print("-" * len(header))
    for (task, name), runs in results.items():
        depth, width, heads, L, vocab = SHAPES[name]
        med = lambda label, clock: statistics.median(r[clock] for r in runs[label])
        ratios = [b["cpu"] / n["cpu"] for b, n in zip(runs["base"], runs["new"])]
        wall = statistics.median(b["wall"] / n["wall"] for b, n in zip(runs["base"], runs["new"]))
        base, new = rates(task, SHAPES[name], med("base", "cpu")), rates(task, SHAPES[name],
                                                                            med("new", "cpu"))
        label = f"{name} {depth}x{width} L{L} V{vocab}"
        print(f"{task:>6}  {label:>22}  {base[0]:>12.2f}  {new[0]:>11.2f}  {base[1]:>10.0f}  "
              f"{new[1]:>9.0f}  {statistics.median(ratios):>7.2f}x  "
              f"{min(ratios):>4.2f}-{max(ratios):<4.2f}x  {wall:>4.2f}x")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args.threads)
    commit = resolve(args.base)
    head = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                          capture_output=True, text=True).stdout.strip()
    shapes, tasks = args.shapes.split(","), args.tasks.split(",")
    print(f"# base {commit[:12]} vs new {head}: batch {BATCH}, d {D}, fp32, CPU, "
          f"{args.threads} thread(s) per worker, {args.repeats} interleaved repeats; medians",
          flush=True)
    results = {(task, name): {"base": [], "new": []} for task in tasks for name in shapes}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": (snapshot(commit, Path(tmp)), args.base_env), "new": (REPO, args.new_env)}
        # One worker per code version and task, as the pipeline runs training and sampling in
        # separate processes (a process's allocator state depends on what it ran before).
        workers = {(label, task): Worker(f"{label} {task}", tree, args.threads, env)
                   for label, (tree, env) in trees.items() for task in tasks}
        try:
            for label in trees:
                elf_dir = workers[(label, tasks[0])].ask(task="hello")["elf"]
                print(f"# {label}: elf from {elf_dir}", flush=True)
            for r in range(args.repeats):
                order = ("base", "new") if r % 2 == 0 else ("new", "base")
                for task in tasks:
                    for name in shapes:
                        count = (args.train_steps or default_train_steps(name)) if task == "train" \
                            else args.sample_batches
                        for label in order:
                            seconds = workers[(label, task)].measure(task, SHAPES[name], count)
                            results[(task, name)][label].append(seconds)
                print(f"# repeat {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)
        finally:
            for w in workers.values():
                w.close()
    print_table(results)


if __name__ == "__main__":
    main()
