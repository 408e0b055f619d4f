"""Benchmark: does self-conditioning carry a signal SC-CFG can scale? One table per variant and step.

SC-CFG is learned through the target ``v* = v + (1 − 1/w)(v̂_c − v̂_u)`` (spec §4): the guided velocity
moves away from the prediction without self-conditioning (``v̂_u``) towards the one with it
(``v̂_c``). If feeding x̂ back barely changes the prediction, w has nothing to scale. This trains a
run (default ``base``) through the pipeline's loop and, at every ``--eval-every`` steps on its EMA
weights, on held-out rows per t:

- ``sc gain``: 1 − (x̂ error with self-conditioning) / (x̂ error without): how much feeding the
  first pass's x̂ back improves the estimate (the x̂ errors are the flow errors up to the common
  factor 1 / max(1 − t, t_eps)²);
- ``|c−u|/err``: ‖x̂_c − x̂_u‖² / ‖x̂_u − x‖², the guidance direction's size relative to the flow error;
- ``w shift``: ‖x̂(w = w_hi) − x̂(w = w_lo)‖² / ‖x̂_u − x‖², how far the SC-CFG input moves x̂ (both
  with self-conditioning);
and at the end (and every ``--sweep-every`` steps, to see at what budget guidance acts) the SC-CFG
sweep itself: Gen. PPL, entropy and repetition of samples at each of ``--samplers`` (default the
16-step ODE at w 0.5 and 3, F4's ends).

    snakemake --cores all results/embeddings/owt/encoder/train.zarr \\
        results/embeddings/owt/encoder/validation.zarr
    python benchmarks/guidance.py --steps 1500 --eval-every 500 recipe
    python benchmarks/guidance.py --steps 1000 'sc_0.8:objective.self_cond_prob=0.8'
    python benchmarks/guidance.py --steps 6000 --eval-every 1000 --sweep-every 1000 recipe

A variant is ``recipe`` (the run as configured) or ``name:key=value,...`` with dotted keys into the
run's settings (``objective.self_cond_prob``, ``objective.sc_cfg_max``, ``objective.noise_scale``,
``model.size``); values are YAML.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import yaml

TIMES = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("variants", nargs="+", help="recipe or name:key=value,...")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", help="results root (default: the config's)")
    p.add_argument("--run", default="base")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=500,
                   help="measure every N steps (a multiple of the run's log_every)")
    p.add_argument("--rows", type=int, default=128, help="held-out rows measured")
    p.add_argument("--w", type=float, nargs=2, default=[0.5, 3.0], metavar=("LO", "HI"))
    p.add_argument("--samplers", nargs="*", default=["ode16_w0.5", "ode16_w3"],
                   help="samplers whose Gen. PPL / entropy are measured at the end (the SC-CFG sweep)")
    p.add_argument("--sweep-every", type=int, default=0,
                   help="also run the sweep every N steps on the EMA weights (0: at the end only)")
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write every number to this JSON file")
    return p.parse_args()


@torch.no_grad()
def guidance_table(model, x: torch.Tensor, valid: torch.Tensor, noise_scale: float, t_eps: float,
                   w: tuple[float, float], seed: int) -> list[dict]:
    """Per t: sc gain, |c−u|/err and w shift on held-out ``x`` (N, L, d) (module docstring)."""
    from elf.flow.paths import interpolate, x_from_output

    g = torch.Generator().manual_seed(seed)
    mask = valid.bool()
    rows = []
    for t in TIMES:
        tb = torch.full((len(x),), t)
        z = interpolate(x, torch.randn(x.shape, generator=g), tb, noise_scale)

        def net(sc, w_value):
            out, _ = model(torch.cat([z, sc], -1), tb, torch.full((len(x),), w_value))
            return x_from_output(out, z, tb, "x", t_eps, noise_scale)

        sq = lambda a, b: float((a - b).pow(2).mean(-1)[mask].mean())  # noqa: E731
        x_u = net(torch.zeros_like(z), 1.0)
        x_c = net(x_u, 1.0)
        err_u, err_c = sq(x_u, x), sq(x_c, x)
        shift = sq(net(x_u, w[1]), net(x_u, w[0]))
        rows.append(dict(t=t, err_u=err_u, err_c=err_c, sc_gain=1 - err_c / err_u,
                         guidance_ratio=sq(x_c, x_u) / err_u, w_shift=shift / err_u))
    return rows


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from recipe import HeldOut, build, generate, parse_candidate, resolve, text_metrics, train_candidate

    from elf.validate import parse_experiment
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import StoreSource

    exp = parse_experiment(yaml.safe_load(Path(args.config).read_text()))
    results = Path(args.results or exp.results)
    tokenizer = load_tokenizer(str(results / "models/tokenizer"))
    vocab = len(tokenizer)
    from elf.evaluate.scorer import load_scorer

    scorer = load_scorer(results / "models/scorer") if args.samplers else None
    report = {"args": vars(args), "variants": {}}
    for text in args.variants:
        name, overrides = parse_candidate(text)
        run, _ = resolve(exp, args.run, overrides, "sde32")
        emb = exp.embeddings[run.embedding]
        store = results / "embeddings" / run.dataset / run.embedding
        source = StoreSource(str(store / "train.zarr"))
        held = HeldOut(str(store / "validation.zarr"), emb, source.stats, limit=args.rows)
        tables, sweeps = {}, {}

        def sweep(net, overrides=overrides) -> dict:
            out = {}
            for sampler_name in args.samplers:
                _, sampler = resolve(exp, args.run, overrides, sampler_name)
                texts = generate(net, sampler, args.samples, source.seq_len, source.dim, tokenizer,
                                 args.seed)
                out[sampler_name] = text_metrics(texts, scorer)
            return out

        def monitor(step, ema, run=run, held=held, tables=tables):
            measure = step % args.eval_every == 0 and step != args.steps
            sweep_now = bool(args.sweep_every) and step % args.sweep_every == 0 and step != args.steps
            if not (measure or sweep_now):
                return {}
            net = build(exp, run, source, vocab)
            net.load_state_dict(ema.shadow)
            net.eval()
            if measure:
                tables[step] = guidance_table(net, held.x, held.valid, run.objective.noise_scale,
                                              run.objective.t_eps, tuple(args.w), args.seed)
            if sweep_now and args.samplers:
                sweeps[step] = sweep(net)
                print_sweep(name, step, sweeps[step], args)
            return {}
        model, seconds, _ = train_candidate(exp, run, emb, source, vocab, args.steps, monitor)
        model.eval()
        tables[args.steps] = guidance_table(model, held.x, held.valid, run.objective.noise_scale,
                                            run.objective.t_eps, tuple(args.w), args.seed)
        sweeps[args.steps] = sweep(model) if args.samplers else {}
        report["variants"][name] = dict(overrides=overrides, train_s=seconds,
                                        sweep=sweeps[args.steps],
                                        sweeps={str(k): v for k, v in sorted(sweeps.items())},
                                        tables={str(k): v for k, v in sorted(tables.items())})
        print_tables(name, tables, args.w)
        for step, measured in sorted(sweeps.items()):
            print_sweep(name, step, measured, args)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


def print_sweep(name: str, step: int, sweep: dict, args) -> None:
    for sampler_name, m in sweep.items():
        print(f"{name} step {step} {sampler_name}: Gen. PPL {m['gen_ppl']:.2f} ± {m['gen_ppl_se']:.2f}, "
              f"entropy {m['entropy']:.3f}, repetition {m['repetition']:.3f} ({args.samples} samples, "
              f"seed {args.seed})", flush=True)


def print_tables(name: str, tables: dict, w) -> None:
    print(f"\n{name}: per t, sc gain = 1 − err(self-cond) / err(none); |c−u|/err = ‖x̂_c − x̂_u‖² / "
          f"err; w shift = ‖x̂(w={w[1]:g}) − x̂(w={w[0]:g})‖² / err (EMA weights, held-out rows)\n")
    print("| step | measure | " + " | ".join(f"t={t}" for t in TIMES) + " |")
    print("|" + "---|" * (len(TIMES) + 2))
    for step, rows in sorted(tables.items()):
        for key, label in (("sc_gain", "sc gain"), ("guidance_ratio", "|c−u|/err"),
                           ("w_shift", "w shift"), ("err_u", "err (no sc)")):
            print(f"| {step} | {label} | " + " | ".join(f"{r[key]:.4f}" for r in rows) + " |")


if __name__ == "__main__":
    main()
