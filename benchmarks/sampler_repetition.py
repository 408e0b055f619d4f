"""Benchmark: which sampler setting drives repetition, on a finished run's EMA weights. One table.

The bar's repetition line (``benchmarks/embedded_bar.py``: the share of a sample's most frequent
word, held-out text 0.18, bar 0.2) is measured on the paper's 32-step system sampler (the config's
``sde32``: SDE γ 1.5, SC-CFG 3). This samples one checkpoint with that sampler (``--sampler``) and with
variants of it, each changing one setting (``key=value`` into ``SamplerSettings``), and prints repetition, Gen. PPL and entropy under the
run's scorer, all on the same noise (evaluation seeds 0, 1, ...). A setting whose variants leave
repetition where the bar's sampler puts it is not the lever; one that moves it is.

    python benchmarks/sampler_repetition.py --results /tmp/dag/results --run base \\
        sc_cfg=1 sc_cfg=2 steps=16 steps=64 gamma=0.5 gamma=2 grid=uniform
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml

from elf.artifacts.names import RUN_SETTINGS
from elf.config import SamplerSettings, from_dict, to_dict
from elf.validate import parse_experiment
from elf.data.tokenizer import load_tokenizer
from elf.evaluate.metrics import unconditional_metrics
from elf.flow.sampling import SamplingJob, sample_rows
from elf.stages.score import load_unconditional_scorer
from elf.train.checkpoint import load_model
from elf.typed import ConfigError

def parse_variant(text: str) -> tuple[str, dict]:
    """``key=value`` (YAML value) → (label, override); a bad key fails when the settings are built."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"variant {text!r}: expected key=value, e.g. sc_cfg=1")
    return text, {key: yaml.safe_load(value)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("variants", nargs="*", type=parse_variant, help="key=value overrides of the bar's sampler")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--sampler", default="sde32", help="the config's sampler the variants change")
    p.add_argument("--results", type=Path, help="a finished DAG's results/ (default: the config's)")
    p.add_argument("--run", default="base")
    p.add_argument("--samples", type=int, default=128, help="samples per evaluation seed")
    p.add_argument("--seeds", type=int, default=2, help="evaluation seeds (0, 1, ...)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    exp = parse_experiment(yaml.safe_load(Path(args.config).read_text()))
    if args.sampler not in exp.samplers:
        p.error(f"--sampler {args.sampler}: not a sampler of {args.config}")
    bar_sampler = to_dict(exp.samplers[args.sampler])
    args.results = args.results or Path(exp.results)
    checkpoint = args.results / "runs" / args.run
    if not (checkpoint / "ema.safetensors").is_file():
        p.error(f"--results {args.results} --run {args.run}: no checkpoint at {checkpoint} "
                "(point --results at a finished DAG's results/)")

    try:  # every variant is validated before anything is sampled
        samplers = [(label, from_dict(SamplerSettings, {**bar_sampler, **override}, f"variant {label}"))
                    for label, override in [(f"bar sampler ({args.sampler})", {})] + args.variants]
    except ConfigError as err:
        p.error(str(err))
    model, meta = load_model(checkpoint, "ema")
    tokenizer = load_tokenizer(str(args.results / "models" / "tokenizer"))
    scorer = load_unconditional_scorer(str(args.results / "models" / "scorer"), "cpu", "fp32", 64, None)
    shape = (model.cfg.max_length, model.cfg.d)
    print(f"{args.run} (EMA), {args.seeds} x {args.samples} samples per row; "
          f"bar sampler {args.sampler}: {bar_sampler}\n")
    print("| sampler | repetition | Gen. PPL | entropy |\n|---|---|---|---|")
    for label, settings in samplers:
        job = SamplingJob(model, settings, tokenizer, torch.device("cpu"), "fp32",
                          prediction=meta[RUN_SETTINGS]["model"]["prediction"], seq_shape=shape, n=args.samples)
        texts = [row["text"] for seed in range(args.seeds) for batch in sample_rows(job, seed, 64)
                 for row in batch]
        metrics = unconditional_metrics(texts, scorer)[0]
        print(f"| {label} | {metrics['repetition']:.3f} | {metrics['gen_ppl']:.2f} | "
              f"{metrics['entropy']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
