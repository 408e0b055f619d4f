"""Training runs of the XLA tests that need a process of their own (tests/test_xla_train.py):

    python tests/xla_worker.py train OUT [--hold-at K]   # the tiny run on XLA; K: wait there to be killed
    CPU_NUM_DEVICES=2 python tests/xla_worker.py train OUT --data-parallel [--grad-accum 2] [--crash-at K]
        # SPMD over the XLA devices, as `elf train --device xla` runs (checkpoints every 3 steps; K:
        # raise CrashForTest after step K); OUT/spmd.json records the device count, the compilations
        # after each step and the shardings the loop marked

``tiny_xla_run`` and ``train_tiny`` are the tests' own runs too."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from elf.flow.objective import draw_step
from elf.train.loop import train
from tests.helpers import TensorBatches, tiny_data, tiny_model, tiny_run


def tiny_xla_run(checkpoint_every: int = 1000):
    """8 steps, batch 8, with lr warm-up (step 1 at lr 0) and EMA warm-up: every per-step scalar
    varies while the step's graph must not. Decode probability 0.5, so that every step has decode
    rows (``decode_rows_per_step``): on a batch without any, XLA steps the decode head's Adam biases
    with zero gradients where the CPU skips them (elf/train/loop.py)."""
    run = tiny_run(8, checkpoint_every=checkpoint_every)
    return dataclasses.replace(run, optim=dataclasses.replace(run.optim, warmup_steps=3),
                               objective=dataclasses.replace(run.objective, decode_prob=0.5))


def decode_rows_per_step(run) -> list[int]:
    """How many decode rows each step of ``run`` draws (the loop's seeded global draws, replayed)."""
    generator = torch.Generator().manual_seed(run.budget.seed)
    return [int(draw_step((run.budget.batch_size, 12, 16), run.objective, generator).decode_row.sum())
            for _ in range(run.budget.steps)]


def train_tiny(out, device, run=None, *, crash=None, monitor=None) -> None:
    run = run or tiny_xla_run()
    model = tiny_model()
    meta = {"model": dataclasses.asdict(model.cfg), "steps": run.budget.steps}
    micro = run.budget.batch_size // run.budget.grad_accum
    train(model, run, TensorBatches(tiny_data(8), micro), out, meta,
          loss_covers_padding=False, seq_shape=(12, 16), progress=False, device=device,
          crash_after_step=crash, monitor=monitor)


def _hold(out: Path, at: int):
    def monitor(step, ema):
        if step == at:
            (out / "held").touch()
            time.sleep(3600)  # until the test kills this process
        return {}
    return monitor


def _recording_shards(specs: list):
    """``elf.train.loop.shard_rows``, recording the sharding each tensor gets."""
    import torch_xla

    import elf.train.loop as loop

    mark = loop.shard_rows

    def shard_rows(tensors):
        tensors = list(tensors)
        mark(tensors)
        specs.extend(torch_xla._XLAC._get_xla_sharding_spec(x) for x in tensors)
    loop.shard_rows = shard_rows


def _data_parallel(out: Path, grad_accum: int, crash_at: int | None) -> None:
    from elf.device import data_parallel_device, data_parallel_size

    device = data_parallel_device()  # before tests.xla_util places anything on the device
    from tests.xla_util import compiles

    specs, seen = [], {}
    _recording_shards(specs)

    def monitor(step, ema):
        seen[step] = compiles()
        return {}
    run = tiny_xla_run(checkpoint_every=3)
    run = dataclasses.replace(run, budget=dataclasses.replace(run.budget, grad_accum=grad_accum))
    train_tiny(out, device, run, monitor=monitor, crash=crash_at)
    (out / "spmd.json").write_text(json.dumps({
        "devices": data_parallel_size(device), "compiles": [seen[k] for k in sorted(seen)],
        "shardings": sorted(set(specs))}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("train",))
    parser.add_argument("out", type=Path)
    parser.add_argument("--hold-at", type=int)
    parser.add_argument("--data-parallel", action="store_true")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--crash-at", type=int)
    args = parser.parse_args()
    from elf.device import resolve

    args.out.mkdir(parents=True, exist_ok=True)
    if args.data_parallel:
        _data_parallel(args.out, args.grad_accum, args.crash_at)
        return
    monitor = _hold(args.out, args.hold_at) if args.hold_at else None
    train_tiny(args.out, resolve("xla"), tiny_xla_run(checkpoint_every=5), monitor=monitor)


if __name__ == "__main__":
    main()
