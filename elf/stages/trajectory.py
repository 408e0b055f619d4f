"""``elf trajectory``: one sampling rollout of a run's checkpoint, decoded along the way (paper F18).

Reads a run directory (config.json + EMA weights) and a tokenizer; writes one JSON file
``{"provenance": {...}, "steps": [{"t", "step", "state", "texts", "token_ids"}, ...]}`` atomically.

After every sampler step k the rollout holds x̂_k, the network's clean estimate from the state at
time t_k = grid[k]; the entry for ``--at`` value a is the step whose t_k is closest to a, decoded
like a sample (decode mode at t = 1 on [x̂_k ; 0], argmax, cut at the first EOS). t = 1 itself is the
final state z_1, decoded exactly as ``elf sample`` decodes it. Several ``--at`` values closest to the
same step give one entry. The noise comes from the same generator as batch 0 of ``elf sample`` with
the same seed (and ``--batch-size`` = ``--n``), so the t = 1 entry is that batch's samples:

    elf trajectory --checkpoint results/runs/base --sampler '{"method": "ode", "steps": 64}' \
        --seed 0 --tokenizer results/models/tokenizer --at 0,0.2,0.4,0.6,0.8,1 --out traj.json

Unconditional runs only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from elf.cli import ElfError, resolve_device
from elf.stages.sample import (add_rollout_args, batch_generator, parse_sampler_settings,
                               rollout_precision)


def register(sub) -> None:
    p = sub.add_parser("trajectory", help="decode x̂ along one sampling rollout (trajectory figure)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_rollout_args(p)
    p.add_argument("--seed", type=int, required=True, help="evaluation seed")
    p.add_argument("--n", type=int, default=1, help="sequences in the rollout batch")
    p.add_argument("--at", required=True,
                   help="comma-separated times in [0, 1]; the closest steps are recorded")
    p.add_argument("--out", required=True, help="trajectory file (.json)")
    p.set_defaults(func=run)


def parse_times(text: str) -> list[float]:
    try:
        times = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise ElfError(f"--at: expected comma-separated numbers, got {text!r}") from err
    if not times or any(not 0.0 <= t <= 1.0 for t in times):
        raise ElfError(f"--at: expected times in [0, 1], got {text!r}")
    return times


def closest_steps(step_times: list[float], at: list[float]) -> list[int]:
    """Sorted unique indices of ``step_times`` closest to each value of ``at`` (first on ties)."""
    return sorted({min(range(len(step_times)), key=lambda i: abs(step_times[i] - a)) for a in at})


def record_trajectory(model, s, z_init, generator, at: list[float], prediction: str = "x"):
    """Roll out from ``z_init``; return the grid and ``[(t, step, state, ids)]`` for the steps
    closest to ``at`` (step N, state "final": the decoded end state; else "x_hat")."""
    import torch

    from elf.flow.samplers import decode_logits, rollout, time_grid

    grid = time_grid(s, generator)
    n_steps = len(grid) - 1
    step_times = [float(t) for t in grid[:-1]] + [1.0]
    wanted = set(closest_steps(step_times, at))
    records = []

    def record(k, t_next, z, x_hat):
        if k in wanted:
            ids = decode_logits(model, x_hat, s.sc_cfg).argmax(-1).cpu()
            records.append((step_times[k], k, "x_hat", ids))

    with torch.no_grad():
        z, _ = rollout(model, s, z_init, generator, grid=grid, prediction=prediction, record=record)
        if n_steps in wanted:
            ids = decode_logits(model, z, s.sc_cfg).argmax(-1).cpu()
            records.append((1.0, n_steps, "final", ids))
    return grid, records


def run(args) -> None:
    import torch

    from elf.config import to_dict
    from elf.data.tokenizer import load_tokenizer
    from elf.flow.samplers import postprocess
    from elf.io import provenance, write_json
    from elf.precision import network_autocast
    from elf.train.checkpoint import checkpoint_sha256, load_model

    settings = parse_sampler_settings(args.sampler)
    at = parse_times(args.at)
    if args.n < 1:
        raise ElfError(f"--n: expected at least 1 sequence, got {args.n}")
    device = resolve_device(args.device)
    try:
        model, meta = load_model(Path(args.checkpoint), "ema", device)
    except FileNotFoundError as err:
        raise ElfError(str(err)) from err
    if meta["dataset"]["task"] != "unconditional":
        raise ElfError(f"{args.checkpoint} is a {meta['dataset']['task']} run; "
                       "`elf trajectory` handles unconditional runs only")
    tokenizer = load_tokenizer(args.tokenizer)
    generator = batch_generator(args.seed, 0)
    L, d = meta["model"]["max_length"], meta["model"]["d"]
    z_init = (settings.noise_scale * torch.randn(args.n, L, d, generator=generator)).to(device)
    precision = rollout_precision(args, settings, meta)
    with network_autocast(device, precision):
        grid, records = record_trajectory(model, settings, z_init, generator, at,
                                          meta["run"]["model"]["prediction"])
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    steps = []
    for t, k, state, ids in records:
        kept = [[tok for tok in row if tok != pad] for row in postprocess(ids, eos, pad).tolist()]
        steps.append(dict(t=t, step=k, state=state, token_ids=kept,
                          texts=[tokenizer.decode(row, skip_special_tokens=True) for row in kept]))
    header = provenance(checkpoint=str(args.checkpoint),
                        checkpoint_sha256=checkpoint_sha256(Path(args.checkpoint)),
                        sampler=args.sampler_name, sampler_settings=to_dict(settings),
                        precision=precision, seed=args.seed, n=args.n, at=at, grid=[float(t) for t in grid])
    write_json(args.out, {"provenance": header, "steps": steps})
