"""One-shot device check (issue 20): what ELF costs on one GPU, in one table, in under 8 minutes.

Run it wherever a GPU is at hand (``benchmarks/device_check.sh``, which calls this); without CUDA,
or with ``--tiny``, it runs the same code at tiny shapes in well under a minute (``tests`` does, so
it cannot rot). Every section has its own time cap (``CAPS``, shrunk to what is left of
``--budget-s``) and runs in isolation: a section that fails (out of memory, say) or runs out of time
prints its row with what it had measured and the reason, and the next one starts. Rows are printed
as they finish, under one header. Nothing is downloaded or written.

Rows (full shapes; ``--tiny`` shrinks every one, the row's shape column says to what):
- ``peak``: the GPU's bf16 matmul peak, the best TFLOP/s of big square bf16 matmuls; MFU's
  denominator in every row (on a CPU, fp32 matmuls: CPUs have no bf16 matmul units to speak of).
- ``train <eager|compile> <fp32|bf16>``: one ELF-B (12 × 768, d 512, vocab 32128) training step at
  L 1024 as ``elf.train.loop.train`` does it per optimiser step (draws, ``training_step`` with the
  gradient-free first pass on the self-conditioning denoise rows, backward, grad clip, Muon +
  Nesterov-Adam, EMA; ``benchmarks/bench_train.make_step``, decode/self-cond rows in fixed counts so
  shapes do not change) under the precision policy ``elf.precision.network_autocast`` (fp32 or
  bf16; fp32 matmuls without TF32, torch's default), the network eager or ``torch.compile``d (the
  compile and its first two steps are reported in the note, not timed). Batch: the largest power of two that fits, found
  by doubling in eager (compile starts from eager's batch, halving on out-of-memory). Seconds per
  step, tokens/s (B·L per step), MFU = the step's FLOPs (``torch.utils.flop_counter`` on one eager
  step: network forward and backward, Newton–Schulz) / step time / peak, peak memory.
- ``loss fp32 vs bf16``: the training loss of one fixed batch with fixed draws and the same weights
  under each policy, and their absolute and relative difference.
- ``sample``: 1000 samples of 1024 tokens with the 32-step SDE sampler (γ 1.5, SC-CFG 3, the
  paper's 32-step system setting) under the bf16 policy: one timed batch (rollout + decode +
  argmax), samples/s, and the extrapolated time for 1000 = ceil(1000 / B) batches.
- ``score``: Gen. PPL scoring with a GPT-2 Large-shaped ``GPT2LMHeadModel`` (36 × 1280, 20 heads,
  context 1024, vocab 50257; random weights from its ``GPT2Config``) in bf16: ``target_nll``
  (``elf.evaluate.genppl``) on one timed batch of 1024-token rows, tokens/s, and the time for 1000.
Peak memory is ``torch.cuda.max_memory_allocated`` of the section ("-" on CPU).

    benchmarks/device_check.sh                  # on a GPU
    benchmarks/device_check.sh --tiny           # anywhere, seconds
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import make_step, random_batch  # noqa: E402

from elf.config import ObjectiveSettings, SamplerSettings  # noqa: E402
from elf.flow.objective import draw_step, training_step  # noqa: E402
from elf.flow.samplers import decode_final, rollout  # noqa: E402
from elf.model import ELF, model_config  # noqa: E402
from elf.precision import network_autocast  # noqa: E402

FULL = dict(model=dict(depth=12, width=768, heads=12, d=512, bottleneck=128, vocab_size=32128),
            length=1024, max_batch=512, matmul=(8192, 16384), sample_batch=250, n_samples=1000,
            gpt2=dict(n_layer=36, n_embd=1280, n_head=20, n_positions=1024, vocab_size=50257),
            score_batch=64, loss_batch=8)
TINY = dict(model=dict(depth=2, width=64, heads=4, d=16, bottleneck=8, vocab_size=64),
            length=32, max_batch=8, matmul=(256, 512), sample_batch=4, n_samples=1000,
            gpt2=dict(n_layer=2, n_embd=64, n_head=2, n_positions=32, vocab_size=256,
                      bos_token_id=255, eos_token_id=255),
            score_batch=4, loss_batch=4)
CAPS = {"peak": 15, "train eager fp32": 55, "train eager bf16": 55, "train compile fp32": 100,
        "train compile bf16": 100, "loss fp32 vs bf16": 20, "sample": 40, "score": 40}  # seconds
SAMPLER = SamplerSettings(method="sde", steps=32, gamma=1.5, sc_cfg=3.0)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--device", default="auto", help="auto: CUDA if available, else CPU (tiny)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (automatic without CUDA)")
    p.add_argument("--budget-s", type=float, default=430, help="wall-clock budget of all sections "
                   "(each also has its cap, CAPS)")
    p.add_argument("--compile-backend", help="torch.compile backend (default: inductor; tiny: "
                   "eager, which traces the same graphs without code generation)")
    p.add_argument("--sections", help="comma-separated subset of: " + ", ".join(CAPS))
    p.add_argument("--steps", type=int, default=3, help="timed steps per training measurement")
    p.add_argument("--threads", type=int, help="CPU threads (default: torch's; tiny: 1)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------------
# Rows, caps, the runner
# --------------------------------------------------------------------------------------------------

COLUMNS = (("row", 20), ("shape", 22), ("batch", 5), ("s/iter", 8), ("throughput", 24),
           ("MFU", 6), ("peak mem", 9), ("note", 0))


@dataclass
class Row:
    name: str
    shape: str = ""
    batch: str = "-"
    seconds: str = "-"
    throughput: str = "-"
    mfu: str = "-"
    memory: str = "-"
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        cells = (self.name, self.shape, self.batch, self.seconds, self.throughput, self.mfu,
                 self.memory, "; ".join(self.notes) or "ok")
        return "  ".join(f"{c:<{w}}" if w else c for c, (_, w) in zip(cells, COLUMNS))


class SectionTimeout(Exception):
    pass


@contextlib.contextmanager
def time_cap(seconds: float):
    """Raise ``SectionTimeout`` in the main thread after ``seconds`` (SIGALRM)."""
    def alarm(signum, frame):
        raise SectionTimeout(f"stopped at its {seconds:.0f} s cap")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_section(name: str, fn, ctx: "Context", cap: float) -> None:
    """Run one section under its cap and print its row, whatever happened."""
    row = Row(name)
    start = time.perf_counter()
    ctx.reset_peak()
    try:
        with time_cap(cap):
            fn(ctx, row)
    except SectionTimeout as err:
        row.notes.append(str(err))
    except Exception as err:  # an OOM, a compile failure: the row says so, the next section runs
        kind = "out of memory" if is_oom(err) else type(err).__name__
        row.notes.append(f"failed ({kind}): {str(err).splitlines()[0][:100] if str(err) else ''}")
    if row.memory == "-":
        row.memory = ctx.peak_memory()
    row.notes.append(f"{time.perf_counter() - start:.0f} s")
    print(row.line(), flush=True)
    release(ctx.device)


class Context:
    """What the sections share: device, shapes, the measured peak, eager's batch sizes, FLOPs."""

    def __init__(self, args):
        if args.device == "auto":
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.device = torch.device(args.device)
        self.tiny = args.tiny or self.device.type != "cuda"
        self.shapes = TINY if self.tiny else FULL
        self.backend = args.compile_backend or ("eager" if self.tiny else "inductor")
        # bf16 matmul peak on a GPU; on a CPU (no bf16 matmul units) fp32's
        self.peak_dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.steps, self.seed = args.steps, args.seed
        self.peak_flops: float | None = None
        self.batch: dict[str, int] = {}
        self.flops: dict[int, float] = {}

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()

    def peak_memory(self) -> str:
        """Peak allocated GPU memory since ``reset_peak`` ("-" on CPU)."""
        if self.device.type != "cuda":
            return "-"
        return f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"

    def model_shape(self) -> str:
        m = self.shapes["model"]
        return f"{m['depth']}x{m['width']} L{self.shapes['length']}"

    def new_model(self) -> ELF:
        torch.manual_seed(self.seed)
        model = ELF(model_config("ELF-B", **self.shapes["model"], max_length=self.shapes["length"]))
        with torch.no_grad():  # a non-zero denoise head, so x̂ and the losses are not trivial
            model.final_layer.linear.weight.normal_(0, 0.02)
        return model.to(self.device)

    def mfu(self, flops: float, seconds: float) -> str:
        return "-" if not self.peak_flops else f"{100 * flops / seconds / self.peak_flops:.1f}%"


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------

def peak_section(ctx: Context, row: Row) -> None:
    best = 0.0
    dtype = "bf16" if ctx.peak_dtype == torch.bfloat16 else "fp32"
    for n in ctx.shapes["matmul"]:
        a = torch.randn(n, n, device=ctx.device, dtype=ctx.peak_dtype)
        b = torch.randn(n, n, device=ctx.device, dtype=ctx.peak_dtype)
        for _ in range(3):
            a @ b
        ctx.sync()
        reps = 10
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        ctx.sync()
        seconds = (time.perf_counter() - start) / reps
        if 2 * n ** 3 / seconds > best:
            best = 2 * n ** 3 / seconds
            row.shape, row.seconds = f"{dtype} {n}^3", f"{seconds:.4f}"
        ctx.peak_flops = best
        row.throughput = f"{best / 1e12:.3g} TFLOP/s"
        del a, b


def step_flops(ctx: Context, model: ELF, batch_size: int) -> float:
    """FLOPs of one eager training step at ``batch_size`` (precision does not change the count)."""
    if batch_size not in ctx.flops:
        time_steps(ctx, training_step_fn(ctx, model, model, batch_size, "fp32"), 1, 0, batch_size)
    return ctx.flops[batch_size]


def training_step_fn(ctx: Context, model: ELF, forward, batch_size: int, precision: str):
    generator = torch.Generator().manual_seed(ctx.seed)
    batch = random_batch(batch_size, ctx.shapes["length"], model.cfg, generator, ctx.device)
    return make_step(model, forward, batch, network_autocast(ctx.device, precision), generator,
                     ctx.device)


def time_steps(ctx: Context, step, warmup: int, steps: int, count_at: int | None = None) -> float:
    """Seconds per step after ``warmup`` untimed steps; with ``count_at`` (the batch size), the
    first warm-up step's FLOPs go into ``ctx.flops`` (``torch.utils.flop_counter``)."""
    from torch.utils.flop_counter import FlopCounterMode

    for k in range(1, warmup + 1):
        counter = FlopCounterMode(display=False) if count_at and k == 1 else None
        with counter or contextlib.nullcontext():
            step(k)
        if counter is not None:
            ctx.flops[count_at] = float(counter.get_total_flops())
    ctx.sync()
    if not steps:
        return 0.0
    start = time.perf_counter()
    for k in range(warmup + 1, warmup + steps + 1):
        step(k)
    ctx.sync()
    return (time.perf_counter() - start) / steps


def fill_train_row(ctx: Context, row: Row, model: ELF, batch_size: int, seconds: float) -> None:
    L = ctx.shapes["length"]
    row.memory = ctx.peak_memory()  # of this batch size (before a larger one is tried)
    row.batch, row.seconds = str(batch_size), f"{seconds:.3f}"
    row.throughput = f"{batch_size * L / seconds:,.0f} tokens/s"
    row.mfu = ctx.mfu(step_flops(ctx, model, batch_size), seconds)


def train_section(compiled: bool, precision: str):
    def section(ctx: Context, row: Row) -> None:
        row.shape = ctx.model_shape()
        model = ctx.new_model().train()
        if compiled:
            return compiled_train(ctx, row, model, precision)
        batch_size = 1
        while batch_size <= ctx.shapes["max_batch"]:
            ctx.reset_peak()
            try:
                step = training_step_fn(ctx, model, model, batch_size, precision)
                seconds = time_steps(ctx, step, warmup=1, steps=ctx.steps, count_at=batch_size)
            except Exception as err:
                if not is_oom(err):
                    raise
                row.notes.append(f"B={batch_size} out of memory")
                break
            finally:
                model.zero_grad(set_to_none=True)
                release(ctx.device)
            ctx.batch[precision] = batch_size
            fill_train_row(ctx, row, model, batch_size, seconds)
            batch_size *= 2
    return section


def compiled_train(ctx: Context, row: Row, model: ELF, precision: str) -> None:
    torch._dynamo.reset()
    forward = torch.compile(model, backend=ctx.backend)
    batch_size = ctx.batch.get(precision, 1)
    row.notes.append(f"backend {ctx.backend}")
    while batch_size >= 1:
        ctx.reset_peak()
        try:
            step = training_step_fn(ctx, model, forward, batch_size, precision)
            start = time.perf_counter()
            step(1), step(2)  # compiles the first-pass and the main graphs (and the backward)
            ctx.sync()
            row.notes.append(f"compile + 2 steps {time.perf_counter() - start:.0f} s")
            seconds = time_steps(ctx, step, warmup=0, steps=ctx.steps)
        except Exception as err:
            if not is_oom(err) or batch_size == 1:
                raise
            row.notes.append(f"B={batch_size} out of memory")
            model.zero_grad(set_to_none=True)
            release(ctx.device)
            batch_size //= 2
            continue
        fill_train_row(ctx, row, model, batch_size, seconds)
        return


def loss_section(ctx: Context, row: Row) -> None:
    model = ctx.new_model().train()
    B, L = ctx.shapes["loss_batch"], ctx.shapes["length"]
    row.shape, row.batch = ctx.model_shape(), str(B)
    generator = torch.Generator().manual_seed(ctx.seed)
    batch = random_batch(B, L, model.cfg, generator, ctx.device)
    s = ObjectiveSettings()
    draws = draw_step((B, L, model.cfg.d), s, generator)
    draws.decode_row[0] = 1.0  # at least one decode row, so the cross-entropy is in the loss
    losses = {}
    for precision in ("fp32", "bf16"):
        with torch.no_grad(), network_autocast(ctx.device, precision):
            losses[precision] = training_step(model, batch, draws.to(ctx.device), s).loss.item()
    diff = abs(losses["bf16"] - losses["fp32"])
    row.throughput = f"fp32 {losses['fp32']:.5f}  bf16 {losses['bf16']:.5f}"
    row.notes.insert(0, f"|diff| {diff:.2e} (rel {diff / abs(losses['fp32']):.1e})")


def sample_section(ctx: Context, row: Row) -> None:
    model = ctx.new_model().eval()
    L, d, n = ctx.shapes["length"], model.cfg.d, ctx.shapes["n_samples"]
    row.shape = f"{ctx.model_shape()} SDE{SAMPLER.steps}"
    generator = torch.Generator().manual_seed(ctx.seed)
    batch_size = ctx.shapes["sample_batch"]

    def one_batch(s: SamplerSettings, B: int) -> float:
        z_init = (s.noise_scale * torch.randn(B, L, d, generator=generator)).to(ctx.device)
        ctx.sync()
        start = time.perf_counter()
        with torch.no_grad(), network_autocast(ctx.device, "bf16"):
            z, _ = rollout(model, s, z_init, generator)
            decode_final(model, z, s.sc_cfg).argmax(-1).cpu()
        ctx.sync()
        return time.perf_counter() - start

    while True:
        ctx.reset_peak()
        try:
            one_batch(SamplerSettings(method="sde", steps=2, gamma=1.5, sc_cfg=3.0), batch_size)
            seconds = one_batch(SAMPLER, batch_size)
            break
        except Exception as err:
            if not is_oom(err) or batch_size == 1:
                raise
            row.notes.append(f"B={batch_size} out of memory")
            release(ctx.device)
            batch_size //= 2
    row.batch, row.seconds, row.memory = str(batch_size), f"{seconds:.2f}", ctx.peak_memory()
    row.throughput = f"{batch_size / seconds:,.1f} samples/s"
    row.notes.insert(0, f"{n} samples: {math.ceil(n / batch_size) * seconds:,.0f} s")


def score_section(ctx: Context, row: Row) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from elf.evaluate.genppl import target_nll

    g = ctx.shapes["gpt2"]
    T, B, n = g["n_positions"], ctx.shapes["score_batch"], ctx.shapes["n_samples"]
    row.shape, row.batch = f"GPT-2 {g['n_layer']}x{g['n_embd']} T{T} bf16", str(B)
    torch.manual_seed(ctx.seed)
    with ctx.device:
        model = GPT2LMHeadModel(GPT2Config(**g)).to(torch.bfloat16).eval()
    ids = torch.randint(0, g["vocab_size"], (B, T), device=ctx.device)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        target_nll(model, ids, mask)
        ctx.sync()
        start = time.perf_counter()
        target_nll(model, ids, mask)
        ctx.sync()
    seconds = time.perf_counter() - start
    row.seconds, row.throughput = f"{seconds:.3f}", f"{B * T / seconds:,.0f} tokens/s"
    row.notes.insert(0, f"{n} samples: {math.ceil(n / B) * seconds:,.1f} s")


SECTIONS = {"peak": peak_section,
            "train eager fp32": train_section(False, "fp32"),
            "train eager bf16": train_section(False, "bf16"),
            "train compile fp32": train_section(True, "fp32"),
            "train compile bf16": train_section(True, "bf16"),
            "loss fp32 vs bf16": loss_section,
            "sample": sample_section,
            "score": score_section}


def main(argv=None) -> None:
    args = parse_args(argv)
    ctx = Context(args)
    if args.threads or ctx.device.type == "cpu" and ctx.tiny:
        torch.set_num_threads(args.threads or 1)
    names = args.sections.split(",") if args.sections else list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "CPU"
    print(f"# device check: {name}, torch {torch.__version__}, {'tiny' if ctx.tiny else 'full'} "
          f"shapes, budget {args.budget_s:.0f} s; rows explained in benchmarks/device_check.py")
    header = "  ".join(f"{c:<{w}}" if w else c for c, w in COLUMNS)
    print(header)
    print("-" * (len(header) + 20), flush=True)
    deadline = time.perf_counter() + args.budget_s
    for section in names:
        left = deadline - time.perf_counter()
        if left < 1:
            print(Row(section, notes=["skipped: budget spent"]).line(), flush=True)
            continue
        run_section(section, SECTIONS[section], ctx, min(CAPS[section], left))


if __name__ == "__main__":
    main()
