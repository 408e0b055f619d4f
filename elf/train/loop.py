"""The training loop (spec §4): draws, objective, clipping, optimiser, EMA, checkpoints, DDP.

Plain and linear in the manner of nanoGPT's ``train.py``. Exactness properties the tests rely on:
- every random draw of a step is made for the *global* batch from one seeded CPU generator, and each
  rank / micro-batch takes its rows, so 1 process and N DDP processes (or grad accumulation) see
  identical draws;
- the loss is normalised by the global batch's mask sum, so summed micro-batch / rank losses equal
  the single-batch loss;
- ``resume/state.pt`` holds weights, optimiser, EMA, step, data position and the generator state, so
  a killed run resumes bitwise-identically on CPU; it and ``train_log.jsonl`` survive a torn write
  (``elf.train.checkpoint``: the state replaced in one rename, an unreadable one skipped; the log
  grows by whole lines and a resumed run drops a torn one with a warning). The stages hold
  ``elf.io.output_lock`` on the run directory around ``train``: one writer at a time.

On an XLA device (``elf.device``) the same loop runs with static shapes (the default step uses
``training_step(static_shapes=True)``), one graph per optimiser step cut by ``torch_xla.sync``, no
host read inside a step (the log line reads its values after the cut), ``torch.compile`` off (XLA
compiles), and checkpoints moved to the CPU before saving. Data parallel there is SPMD over the
host's XLA devices (``elf.device.data_parallel_device``): one process, and each global micro-batch's
tensors (data and draws) split by rows over the devices (``shard_rows``), so device k holds the rows DDP
rank k would take; the step is the single-device step on the whole micro-batch (XLA inserts the gradient
all-reduce). One difference from the CPU/GPU step: on a global batch without any decode row the decode
head's gradients are zeros on XLA where they are None elsewhere, so Nesterov-Adam steps its two biases
(moments decaying) where it would skip them; such a batch has probability (1 − decode_prob)^batch_size
(0.8^256 ≈ 1e-25 at the paper's settings).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator, Protocol

import torch
import torch.distributed as dist
from tqdm import tqdm

from elf.artifacts.names import TRAIN_LOG
from elf.config import RunSettings
from elf.device import (data_parallel_device, data_parallel_size, is_xla, requested, shard_rows, sync,
                        to_cpu)
from elf.flow.objective import draw_step, loss_mask, training_step
from elf.io import append_line, atomic_path, sha256_json
from elf.precision import network_autocast
from elf.train.checkpoint import clear_resume, load_resume, save_final, save_resume
from elf.train.optim import EMA, build_optimizer, clip_grad_norm, lr_at


class BatchSource(Protocol):
    """Yields this rank's rows of successive global micro-batches; resumable."""
    def __iter__(self) -> Iterator[dict]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


def init_distributed(device_name: str = "auto") -> tuple[int, int, torch.device]:
    """Rank, world size and device; joins the process group when launched by ``torchrun``.
    ``device_name`` is a stage's ``--device`` (``elf.device.requested``): CUDA (the process's
    ``LOCAL_RANK`` GPU), the CPU, or on ``xla`` the host's XLA devices as one process (SPMD)."""
    name = requested(device_name).split(":")[0]
    if name == "xla":
        return 0, 1, data_parallel_device()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if name == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device(name)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world_size, device


def _all_reduce(x: torch.Tensor, world_size: int) -> torch.Tensor:
    if world_size > 1:
        dist.all_reduce(x)
    return x


class CrashForTest(RuntimeError):
    """Raised by ``train(..., crash_after_step=k)`` to simulate a killed job in tests."""


def train(model: torch.nn.Module, run: RunSettings, batches: BatchSource, out_dir: Path, meta: dict,
          *, loss_covers_padding: bool, seq_shape: tuple[int, int], rank: int = 0,
          world_size: int = 1, device: torch.device | str = "cpu", progress: bool = True,
          crash_after_step: int | None = None, draw_fn: Callable | None = None,
          step_fn: Callable | None = None, after_step: Callable[[], None] | None = None,
          precision: str = "fp32", monitor: Callable[[int, EMA], dict] | None = None) -> None:
    """Train ``model`` per ``run`` and write the final checkpoint into ``out_dir``.

    ``seq_shape`` = (L, d) of one sequence's embeddings; ``meta`` goes into ``config.json``.
    The objective is pluggable (progressive distillation, ``elf/stages/distill.py``):
    ``draw_fn(global_shape, generator)`` returns a step's draws (a dataclass of batch-first tensors
    with ``.to(device)``) and ``step_fn(net, batch, draws, denominator)`` a ``StepOutput``; the
    defaults are spec §4's ``draw_step`` and ``training_step``. ``after_step()`` runs after every
    optimiser step, before the EMA update (embedding kind ``learned``: renormalise the table).
    ``precision`` is the network's precision policy (``elf.precision``: ``fp32`` or ``bf16``).
    ``monitor(step, ema)`` runs at every log step on rank 0; the values it returns (held-out errors,
    say) join that step's line of ``train_log.jsonl``.
    """
    if draw_fn is None:
        def draw_fn(shape, gen):
            return draw_step(shape, run.objective, gen)
    device = torch.device(device)
    xla = is_xla(device)
    if step_fn is None:
        def step_fn(net, batch, draws, denominator):
            return training_step(net, batch, draws, run.objective, prediction=run.model.prediction,
                                 loss_covers_padding=loss_covers_padding, denominator=denominator,
                                 first_pass_all_rows=False, static_shapes=xla)
    out_dir = Path(out_dir)
    b, o = run.budget, run.optim
    micro_global = b.batch_size // b.grad_accum
    if micro_global * b.grad_accum != b.batch_size or micro_global % world_size:
        raise ValueError(f"batch_size {b.batch_size} must split into grad_accum {b.grad_accum} "
                         f"micro-batches divisible by {world_size} processes")
    devices = data_parallel_size(device)
    if micro_global % devices:
        raise ValueError(f"batch_size {b.batch_size} / grad_accum {b.grad_accum}: micro-batch "
                         f"{micro_global} does not split over the {devices} XLA devices")
    micro_local = micro_global // world_size
    model.to(device)
    generator = torch.Generator().manual_seed(b.seed)
    ema = EMA(model, o.ema_decay, o.ema_warmup)
    optimizer = build_optimizer(model.named_parameters(), o, lr_at(1, o, b.batch_size))
    run_hash = sha256_json(meta)
    step = 0
    state = load_resume(out_dir)
    if state is not None and state["run_hash"] == run_hash:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        ema.load_state_dict(state["ema"])
        batches.load_state_dict(state["data"])
        generator.set_state(state["generator"])
        step = int(state["step"])
    net = model
    if world_size > 1 and not xla:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=True)  # the decode head is idle on batches without decode rows
    forward = torch.compile(net) if b.compile and not xla else net
    autocast = network_autocast(device, precision)
    log_path = out_dir / TRAIN_LOG
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        _truncate_log(log_path, step)
    data = iter(batches)
    bar = tqdm(total=b.steps, initial=step, disable=not progress or rank != 0, desc="train",
               unit="step")
    tokens_per_step = b.batch_size * seq_shape[0]
    t_last = time.perf_counter()
    while step < b.steps:
        micro = [{k: v.to(device, non_blocking=True) for k, v in next(data).items()}
                 for _ in range(b.grad_accum)]
        for batch in micro:
            shard_rows(batch.values())
        denom = sum(loss_mask(m, loss_covers_padding).sum() for m in micro)
        denom = _all_reduce(denom.clone().float(), world_size).clamp_min(1)
        sums = torch.zeros(5, device=device)  # out.sums (4) and the loss, over micro-batches
        step_draws = draw_fn((b.batch_size, *seq_shape), generator)
        for i, batch in enumerate(micro):
            start = i * micro_global + rank * micro_local
            rows = slice(start, start + micro_local)
            draws = type(step_draws)(**{k: v[rows] for k, v in vars(step_draws).items()}).to(device)
            shard_rows(vars(draws).values())
            no_sync = contextlib.nullcontext() if (world_size == 1 or xla or i == b.grad_accum - 1) \
                else net.no_sync()
            with no_sync, autocast:
                out = step_fn(forward, batch, draws, denom)
                # DDP averages gradients over ranks; the loss is already globally normalised.
                (out.loss * world_size).backward()
            sums += torch.cat([out.sums.float(), out.loss.detach().float()[None]])
        sums = _all_reduce(sums, world_size)
        grad_norm, _ = clip_grad_norm(model.parameters(), o.grad_clip)
        lr = lr_at(step + 1, o, b.batch_size)
        optimizer.set_lr(lr)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if after_step is not None:
            after_step()
        ema.update(model)
        sync(device)  # XLA: the step's graph ends here
        step += 1
        bar.update(1)
        if rank == 0 and (step % b.log_every == 0 or step == b.steps):
            now = time.perf_counter()
            host = sums.cpu()  # one read of the finished step (on XLA: no graph of its own)
            record = dict(step=step, loss=float(host[4]),
                          ce_loss=float(host[0] / host[2].clamp_min(1)),
                          l2_loss=float(host[1] / host[3].clamp_min(1)),
                          grad_norm=float(grad_norm), lr=lr,
                          tokens_per_s=tokens_per_step * b.log_every / max(now - t_last, 1e-9))
            if monitor is not None:
                record.update(monitor(step, ema))
            t_last = time.perf_counter()  # the monitor's time is not training time
            bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.0f}")
            append_line(log_path, json.dumps(record))
        if step % b.checkpoint_every == 0 and step < b.steps and rank == 0:
            save_resume(out_dir, to_cpu(dict(
                run_hash=run_hash, step=step, model=model.state_dict(),
                optimizer=optimizer.state_dict(), ema=ema.state_dict(), data=batches.state_dict(),
                generator=generator.get_state())))
        if world_size > 1 and not xla:
            dist.barrier()
        if crash_after_step is not None and step == crash_after_step:
            raise CrashForTest(f"simulated crash after step {step}")
    bar.close()
    if rank == 0:
        save_final(out_dir, model.state_dict(), ema.shadow, meta)  # (it moves them to the CPU)
        clear_resume(out_dir)


def _truncate_log(path: Path, step: int) -> None:
    """Keep only log lines up to ``step`` (a resumed run rewrites what came after), rewritten in one
    rename; a torn line (a write cut by a crash) is dropped with a warning."""
    if not path.exists():
        return
    kept, torn = [], []
    for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), 1):
        try:
            record = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            torn += [number] if line.strip() else []
        elif record["step"] <= step:
            kept.append(line)
    if torn:
        warnings.warn(f"{path}: dropping {len(torn)} cut or unreadable line(s) (line {torn[0]}"
                      f"{' ...' if len(torn) > 1 else ''}): a write was interrupted",
                      RuntimeWarning, stacklevel=2)
    with atomic_path(path) as tmp:
        tmp.write_text("".join(line + "\n" for line in kept))
