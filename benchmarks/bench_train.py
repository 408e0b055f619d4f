"""Benchmark: ELF training throughput (tokens/s) for model sizes side by side, eager vs torch.compile,
fp32 vs bf16 autocast, on the machine at hand.

One training step is what ``elf.train.loop.train`` does per optimiser step, on random data:
``draw_step`` → ``training_step`` (elf/flow/objective.py) under autocast → backward →
``clip_grad_norm`` → ``set_lr(lr_at(k))`` → Muon/Nesterov-Adam step (elf/train/optim.py) → EMA update.
Each (size, variant) starts from a freshly initialised network, runs ``--warmup`` untimed steps
(these include torch.compile's compilation) and times ``--steps`` steps. The decode branch takes
exactly max(1, round(0.2·B)) rows per step and self-conditioning the last round(0.5·B) (not
Bernoulli draws per row), so the compiled graphs keep one shape and every step costs the same; every
other draw is random as in training. Like the loop, the gradient-free first pass runs on the
self-conditioning denoise rows only. ``benchmarks/speedup.py`` compares against a base commit.
bf16 autocast runs on CUDA where the GPU supports bf16, and on CPU via ``torch.autocast("cpu")``.
Nothing is written.

    python benchmarks/bench_train.py                         # CPU: tiny + a short ELF-B measurement
    python benchmarks/bench_train.py --steps 20 --device cuda --batch-elfb 32 --length-elfb 1024
    python benchmarks/bench_train.py --sizes tiny --variants eager-fp32,compile-fp32
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from elf.config import ObjectiveSettings, OptimSettings
from elf.flow.objective import draw_step, training_step
from elf.model import ELF, model_config
from elf.train.optim import EMA, build_optimizer, clip_grad_norm, lr_at

SHAPES = {
    "tiny": dict(depth=2, width=64, heads=4, d=16, bottleneck=8, vocab_size=64),
    "ELF-B": dict(depth=12, width=768, heads=12, d=512, bottleneck=128, vocab_size=32128),
}
VARIANTS = ("eager-fp32", "eager-bf16", "compile-fp32", "compile-bf16")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="tiny,ELF-B", help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of "
                   + ", ".join(VARIANTS))
    p.add_argument("--steps", type=int, help="timed training steps per measurement (default: 10; "
                   "ELF-B on CPU: 2)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default: 1 eager, 2 compiled: "
                   "the decode rows' graph and the gradient-free first pass compile separately)")
    p.add_argument("--batch-tiny", type=int, default=8)
    p.add_argument("--length-tiny", type=int, default=32)
    p.add_argument("--batch-elfb", type=int, help="ELF-B batch (default: 2 on CPU, 32 on CUDA)")
    p.add_argument("--length-elfb", type=int, help="ELF-B length (default: 64 on CPU, 1024 on CUDA)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def steps_of(size: str, variant: str, args) -> tuple[int, int]:
    """(warm-up, timed) steps of one measurement."""
    warmup = args.warmup if args.warmup is not None else (2 if variant.startswith("compile") else 1)
    cpu_elfb = size == "ELF-B" and not args.device.startswith("cuda")
    return warmup, args.steps or (2 if cpu_elfb else 10)


def shape_of(size: str, args) -> tuple[int, int]:
    """(batch, length) of one measurement."""
    if size == "tiny":
        return args.batch_tiny, args.length_tiny
    cuda = args.device.startswith("cuda")
    return (args.batch_elfb or (32 if cuda else 2)), (args.length_elfb or (1024 if cuda else 64))


def random_batch(B: int, L: int, cfg, generator: torch.Generator, device) -> dict:
    batch = dict(x=0.2 * torch.randn(B, L, cfg.d, generator=generator),
                 input_ids=torch.randint(3, cfg.vocab_size, (B, L), generator=generator),
                 attention_mask=torch.ones(B, L, dtype=torch.long),
                 cond_seq_mask=torch.zeros(B, L, dtype=torch.long))
    return {k: v.to(device) for k, v in batch.items()}


def bf16_supported(device: str) -> bool:
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    return True  # CPU autocast to bf16 is part of torch


def autocast_for(device: str, bf16: bool):
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast("cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fixed_roles(B: int, s: ObjectiveSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """(decode_row, use_self_cond) with fixed counts: the first max(1, round(p·B)) rows decode, the
    last round(p_sc·B) self-condition, so every step has the same shapes (one compiled graph)."""
    decode, self_cond = torch.zeros(B), torch.zeros(B)
    decode[:max(1, round(s.decode_prob * B))] = 1.0
    n_sc = round(s.self_cond_prob * B)
    if n_sc:
        self_cond[-n_sc:] = 1.0
    return decode, self_cond


def make_step(model, forward, batch: dict, autocast, generator: torch.Generator, device: str,
              optim_s: OptimSettings = OptimSettings(), obj_s: ObjectiveSettings = ObjectiveSettings()):
    """``step(k)``: optimiser step k of ``elf.train.loop.train`` (one micro-batch, one process) on
    ``batch``, with ``fixed_roles``; ``forward`` is the network the objective calls (``model``
    or ``torch.compile(model)``)."""
    B, L = batch["input_ids"].shape
    optimizer = build_optimizer(model.named_parameters(), optim_s, lr_at(1, optim_s, B))
    ema = EMA(model, optim_s.ema_decay)
    decode, self_cond = fixed_roles(B, obj_s)

    def step(k: int) -> torch.Tensor:
        draws = draw_step((B, L, model.cfg.d), obj_s, generator)
        draws.decode_row, draws.use_self_cond = decode.clone(), self_cond.clone()
        with autocast:
            out = training_step(forward, batch, draws.to(device), obj_s, first_pass_all_rows=False)
        out.loss.backward()
        clip_grad_norm(model.parameters(), optim_s.grad_clip)
        optimizer.set_lr(lr_at(k, optim_s, B))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ema.update(model)
        return out.loss.detach()

    return step


def measure(size: str, variant: str, args) -> dict:
    """Warm up, then time ``args.steps`` steps; returns the row of the table."""
    B, L = shape_of(size, args)
    warmup, steps = steps_of(size, variant, args)
    torch.manual_seed(args.seed)
    model = ELF(model_config("ELF-B", **SHAPES[size], max_length=L)).to(args.device).train()
    forward = torch.compile(model) if variant.startswith("compile") else model
    autocast = autocast_for(args.device, variant.endswith("bf16"))
    generator = torch.Generator().manual_seed(args.seed)
    batch = random_batch(B, L, model.cfg, generator, args.device)
    step = make_step(model, forward, batch, autocast, generator, args.device)

    start = time.perf_counter()
    for k in range(1, warmup + 1):
        step(k)
    synchronize(args.device)
    warm_s = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(warmup + 1, warmup + steps + 1):
        step(k)
    synchronize(args.device)
    seconds = time.perf_counter() - start
    return dict(size=size, variant=variant, B=B, L=L, params=model.num_parameters() / 1e6,
                warmup=warmup, steps=steps, warm_s=warm_s, step_s=seconds / steps,
                tokens_s=B * L * steps / seconds)


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes, variants = args.sizes.split(","), args.variants.split(",")
    for name in variants:
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    print(f"# training benchmark: device {args.device}, {torch.get_num_threads()} threads, "
          "Muon + EMA, random data; warm-up includes compilation")
    if not args.device.startswith("cuda") and "ELF-B" in sizes:
        B, L = shape_of("ELF-B", args)
        warmup, steps = steps_of("ELF-B", "eager", args)
        print(f"# CPU: ELF-B is measured briefly ({steps} timed steps at batch {B} x length {L}; "
              "paper: 512 x 1024): a rough CPU figure, dominated by Muon's Newton-Schulz")
    header = f"{'size':>6}  {'variant':>12}  {'params(M)':>9}  {'B x L':>10}  {'steps':>7}  " \
             f"{'warm-up s':>9}  {'s/step':>8}  {'tokens/s':>10}"
    print(header)
    print("-" * len(header))
    for size in sizes:
        for variant in variants:
            label = f"{size:>6}  {variant:>12}"
            if variant.endswith("bf16") and not bf16_supported(args.device):
                print(f"{label}  bf16 not supported on {args.device}")
                continue
            try:
                r = measure(size, variant, args)
            except Exception as err:  # e.g. torch.compile without a working C++ toolchain
                print(f"{label}  failed: {type(err).__name__}: {str(err).splitlines()[0][:80]}")
                continue
            steps = f"{r['warmup']}+{r['steps']}"
            print(f"{label}  {r['params']:>9.1f}  {r['B']:>4} x {r['L']:<4}  {steps:>7}  "
                  f"{r['warm_s']:>9.1f}  "
                  f"{r['step_s']:>8.3f}  {r['tokens_s']:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
