"""Benchmark: sampling throughput of the ELF samplers (elf/flow/samplers.py) on the machine at hand.

Builds a randomly initialised ELF network of the chosen size (no checkpoint needed: speed does not
depend on the weights), then for every combination of steps (8/32/64), method (ODE / SDE) and input
CFG (off: unconditional, one forward per step; on: a conditional batch with the first half of each
sequence as source and input CFG 2, two forwards per step) times one rollout + decode of a batch and
prints samples/s. Network forwards are counted by a wrapper around the model, so the table also
shows the measured forwards per sample (a batch's forwards serve all of its samples): N (+1 decode)
without input CFG, 2N (+1) with it. Nothing is written.

    python benchmarks/bench_sampler.py                          # tiny model, ~1 min on 2 CPU cores
    python benchmarks/bench_sampler.py --size small --batch 4
    python benchmarks/bench_sampler.py --size ELF-B --length 1024 --batch 64 --device cuda --bf16
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from elf.config import SamplerSettings
from elf.flow.samplers import Source, decode_logits, rollout
from elf.model import ELF, model_config

# size → (ModelConfig fields, default length, default batch); ELF-B is the paper's B with T5-small d.
SIZES = {
    "tiny": (dict(depth=2, width=64, heads=4, d=16, bottleneck=8, vocab_size=64), 32, 8),
    "small": (dict(depth=4, width=256, heads=4, d=64, bottleneck=32, vocab_size=1024), 64, 8),
    "ELF-B": (dict(depth=12, width=768, heads=12, d=512, bottleneck=128, vocab_size=32128), 1024, 64),
}


class CountingNet(torch.nn.Module):
    """Forwards to ``net`` and counts calls (the denoiser's and the decode forward alike)."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net, self.calls = net, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self.net(*args, **kwargs)

    def decode(self, h):
        return self.net.decode(h)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny", choices=tuple(SIZES))
    p.add_argument("--length", type=int, help="sequence length L (default: per size)")
    p.add_argument("--batch", type=int, help="samples per batch (default: per size)")
    p.add_argument("--steps", default="8,32,64", help="comma-separated step counts")
    p.add_argument("--gamma", type=float, default=1.0, help="SDE noise re-injection scale")
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA)")
    p.add_argument("--threads", type=int, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def build(args) -> tuple[CountingNet, int, int, int]:
    fields, length, batch = SIZES[args.size]
    length, batch = args.length or length, args.batch or batch
    torch.manual_seed(args.seed)
    model = ELF(model_config("ELF-B", **fields, max_length=length))
    with torch.no_grad():  # a non-zero denoise head, so states move as in a trained model
        model.final_layer.linear.weight.normal_(0, 0.02)
    return CountingNet(model.to(args.device).eval()), length, batch, fields["d"]


def sample_once(net, s: SamplerSettings, batch, length, d, device, conditional, generator):
    """One batch: rollout + decode + argmax. Returns the forwards it took."""
    z_init = (s.noise_scale * torch.randn(batch, length, d, generator=generator)).to(device)
    source = None
    if conditional:
        mask = torch.zeros(batch, length, dtype=torch.bool)
        mask[:, :length // 2] = True
        source = Source(mask.to(device), torch.randn(batch, length, d, generator=generator).to(device))
    net.calls = 0
    z, _ = rollout(net, s, z_init, generator, source=source)
    decode_logits(net, z, s.sc_cfg).argmax(-1)
    return net.calls


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    net, length, batch, d = build(args)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    generator = torch.Generator().manual_seed(args.seed)
    steps = [int(n) for n in args.steps.split(",")]
    params = sum(p.numel() for p in net.parameters()) / 1e6
    print(f"# sampler benchmark: size {args.size} ({params:.1f}M params), L={length}, batch {batch}, "
          f"device {args.device}{', bf16' if args.bf16 else ''}, {torch.get_num_threads()} threads, "
          f"SDE gamma {args.gamma}; input CFG = conditional batch (half source), scale 2")
    header = f"{'steps':>5}  {'method':>6}  {'input CFG':>9}  {'calls/sample':>12}  " \
             f"{'expected':>8}  {'seconds':>8}  {'samples/s':>10}"
    print(header)
    print("-" * len(header))
    with torch.no_grad(), autocast:
        sample_once(net, SamplerSettings(steps=2), batch, length, d, args.device, False, generator)
        for n in steps:
            for method in ("ode", "sde"):
                for cfg in (False, True):
                    s = SamplerSettings(method=method, steps=n, gamma=args.gamma,
                                        input_cfg=2.0 if cfg else 1.0)
                    synchronize(args.device)
                    start = time.perf_counter()
                    calls = sample_once(net, s, batch, length, d, args.device, cfg, generator)
                    synchronize(args.device)
                    seconds = time.perf_counter() - start
                    expected = (2 if cfg else 1) * n + 1
                    print(f"{n:>5}  {method:>6}  {'on' if cfg else 'off':>9}  {calls:>12}  "
                          f"{expected:>8}  {seconds:>8.2f}  {batch / seconds:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
