r"""``elf trajectory``: one sampling rollout of a run's checkpoint, decoded along the way (paper F18).

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

Unconditional runs only. The rollout and its decoding are ``elf.flow.sampling``'s
(``record_trajectory``); this stage loads the checkpoint and writes the file.
"""

from __future__ import annotations

from pathlib import Path

from elf.errors import ElfError
from elf.stages.args import resolve_device
from elf.stages.sample import add_rollout_args, parse_sampler


def register(sub) -> None:
    p = sub.add_parser("trajectory", help="decode x̂ along one sampling rollout (trajectory figure)",
                       description=__doc__)
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


def run(args) -> None:
    settings = parse_sampler(args.sampler)
    at = parse_times(args.at)
    if args.n < 1:
        raise ElfError(f"--n: expected at least 1 sequence, got {args.n}")
    write_trajectory(Path(args.checkpoint), settings, sampler_name=args.sampler_name, seed=args.seed,
                     n=args.n, at=at, tokenizer_ref=args.tokenizer, device=resolve_device(args.device),
                     asked_precision=args.precision, out=Path(args.out))


def write_trajectory(checkpoint: Path, settings, *, sampler_name: str, seed: int, n: int,
                     at: list[float], tokenizer_ref: str, device, asked_precision: str | None,
                     out: Path) -> None:
    import torch

    from elf.artifacts.names import PROVENANCE, RUN_DATASET, RUN_MODEL, RUN_SETTINGS
    from elf.config import to_dict
    from elf.flow.sampling import batch_generator, decoded_steps, record_trajectory, rollout_precision
    from elf.io import provenance, write_json
    from elf.precision import network_autocast
    from elf.stages.sample import load_checkpoint
    from elf.train.checkpoint import checkpoint_sha256

    model, meta, tokenizer = load_checkpoint(checkpoint, tokenizer_ref, device)
    task = meta[RUN_DATASET]["task"]
    if task != "unconditional":
        raise ElfError(f"{checkpoint} is a {task} run; `elf trajectory` handles unconditional runs only")
    generator = batch_generator(seed, 0)
    L, d = meta[RUN_MODEL]["max_length"], meta[RUN_MODEL]["d"]
    z_init = (settings.noise_scale * torch.randn(n, L, d, generator=generator)).to(device)
    precision = rollout_precision(asked_precision, settings, meta)
    with network_autocast(device, precision):
        grid, records = record_trajectory(model, settings, z_init, generator, at,
                                          meta[RUN_SETTINGS]["model"]["prediction"])
    header = provenance(checkpoint=str(checkpoint), checkpoint_sha256=checkpoint_sha256(checkpoint),
                        sampler=sampler_name, sampler_settings=to_dict(settings), precision=precision,
                        seed=seed, n=n, at=at, grid=[float(t) for t in grid])
    write_json(out, {PROVENANCE: header, "steps": decoded_steps(records, tokenizer)})
