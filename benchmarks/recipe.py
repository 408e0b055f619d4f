"""Benchmark: does a training recipe learn language on this machine? One table, candidates side by side.

Each candidate is a run of the config (``--run``, default ``base``) with some settings overridden. It
trains through the pipeline's own loop (``elf.train.loop.train``) for a fixed wall-clock budget (the
step count comes from timing a short probe of the same candidate) or a fixed step count, then, on its
EMA weights:
- held-out denoising error per t, as a ratio to the per-channel linear (Wiener) denoiser under the same
  noise (``elf.evaluate.denoise``): below 1 means the network uses context;
- decode cross-entropy on held-out rows (the training decode-noise distribution);
- samples from the sampler ``--sampler`` (default the paper's 32-step system setting: SDE γ 1.5,
  SC-CFG 3) with the candidate's noise scale and time distribution: Gen. PPL and entropy under the
  embedded scorer, repetition (share of a sample's most frequent word) and the grammar measure
  (``elf.data.recognize``: share of complete sentences the corpus grammar accepts, and of samples
  keeping one tense);
beside calibration lines: held-out rows cut at their first EOS as samples are (and whole), the same
rows with their tokens shuffled, i.i.d. unigram tokens.

Needs the embedded default's data, encoder and scorer (about 2 minutes):

    snakemake --cores all results/embeddings/owt/encoder/train.zarr \\
        results/embeddings/owt/encoder/validation.zarr results/models/scorer
    python benchmarks/recipe.py --budget-s 300 recipe paper_noise noise_0.7 tiny_m
    python benchmarks/recipe.py --steps 500 'try:objective.noise_scale=0.7,model.size=tiny_m'
    python benchmarks/recipe.py --from-json a.json b.json      # the tables of earlier runs again

A candidate is a preset name (``PRESETS`` below, the ones the search tried) or
``name:key=value,...`` with dotted keys into the run's settings (``objective.noise_scale``,
``model.size``, ``optim.blr``, ``budget.batch_size``, ``embedding``) or ``sampler.<key>``; values are
YAML. Sampling follows the candidate's training noise: the sampler's ``noise_scale``, ``grid_mean`` and
``grid_std`` are the objective's ``noise_scale``, ``t_mean`` and ``t_std`` unless overridden.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from elf.config import EmbeddingSettings, RunSettings, SamplerSettings, deep_merge, from_dict
from elf.validate import parse_experiment

TIMES = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)

# Candidates tried by the search, as overrides of the config's run (``recipe``: the run as configured).
PRESETS: dict[str, dict] = {
    "recipe": {},
    "paper_noise": {"objective.noise_scale": 2.0, "objective.decode_noise_scale": 5.0},
    "noise_0.7": {"objective.noise_scale": 0.7, "objective.decode_noise_scale": 1.75},
    "noise_1.4": {"objective.noise_scale": 1.4, "objective.decode_noise_scale": 3.5},
    "t_mean_-0.8": {"objective.t_mean": -0.8},
    "tiny_m": {"model.size": "tiny_m"},
    "batch_64": {"budget.batch_size": 64},
    "blr_0.1": {"optim.blr": 0.1},
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("candidates", nargs="*", help="preset names or name:key=value,...")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", help="results root (default: the config's)")
    p.add_argument("--run", default="base", help="the config run every candidate overrides")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float, default=240.0, help="training wall-clock seconds")
    budget.add_argument("--steps", type=int, help="training steps instead of a time budget")
    p.add_argument("--sampler", default="sde32", help="sampler name in the config")
    p.add_argument("--samples", type=int, default=64, help="samples per candidate")
    p.add_argument("--eval-every", type=int, default=0,
                   help="log held-out L2 ratios every N steps into the JSON (0: end only)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0, help="sampling / evaluation noise seed")
    p.add_argument("--json", help="also write every number to this JSON file")
    p.add_argument("--from-json", nargs="+", metavar="JSON",
                   help="train nothing: print the tables of earlier --json reports, each with its calibration")
    return p.parse_args()


# ---------------------------------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------------------------------

def parse_candidate(text: str) -> tuple[str, dict]:
    if ":" not in text:
        if text not in PRESETS:
            raise SystemExit(f"unknown preset {text!r}; presets: {', '.join(PRESETS)}")
        return text, PRESETS[text]
    name, _, spec = text.partition(":")
    overrides = {}
    for item in filter(None, spec.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"candidate {name!r}: {item!r} is not key=value")
        overrides[key.strip()] = yaml.safe_load(value)
    return name, overrides


def nested(overrides: dict, prefix: str = "") -> dict:
    """{'a.b': 1} → {'a': {'b': 1}} for the keys under ``prefix``."""
    out: dict = {}
    for key, value in overrides.items():
        if prefix and not key.startswith(prefix):
            continue
        if not prefix and key.startswith("sampler."):
            continue
        parts = key[len(prefix):].split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def resolve(exp, run_name: str, overrides: dict, sampler_name: str):
    base = deep_merge(exp.run_defaults, exp.runs[run_name])
    run = from_dict(RunSettings, deep_merge(base, nested(overrides)), f"candidate of {run_name}")
    sampler = exp.samplers[sampler_name]
    follow = dict(noise_scale=run.objective.noise_scale, grid_mean=run.objective.t_mean,
                  grid_std=run.objective.t_std, t_eps=run.objective.t_eps)
    sampler = replace(sampler, **{**follow, **nested(overrides, "sampler.")})
    return run, from_dict(SamplerSettings, json.loads(json.dumps(sampler.__dict__)), "sampler")


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------

def build(exp, run: RunSettings, store, vocab: int):
    from elf.model import ELF, run_model_config

    cfg = run_model_config(run.model, exp.sizes, d=store.dim, vocab_size=vocab, max_length=store.seq_len)
    torch.manual_seed(run.budget.seed)
    return ELF(cfg)


def train_candidate(exp, run, emb: EmbeddingSettings, source, vocab, steps, monitor=None):
    """Train ``run`` for ``steps`` through the pipeline's loop; (EMA model, seconds, log lines)."""
    from elf.embed.reader import ShuffledBatches
    from elf.train.loop import train
    from elf.train.checkpoint import load_model

    run = replace(run, budget=replace(run.budget, steps=steps, checkpoint_every=10 ** 9))
    model = build(exp, run, source, vocab)
    batches = ShuffledBatches(source, run.budget.batch_size, seed=run.budget.seed,
                              normalization=emb.normalization, mean=emb.mean, std=emb.std)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train(model, run, batches, Path(tmp), {"model": model.cfg.__dict__, "run": {}},
              loss_covers_padding=False, seq_shape=(source.seq_len, source.dim), progress=False,
              monitor=monitor)
        seconds = time.perf_counter() - start
        ema_model, _ = load_model(Path(tmp), "ema")
        log = [json.loads(line) for line in (Path(tmp) / "train_log.jsonl").read_text().splitlines()]
    batches.close()
    return ema_model, seconds, log


def steps_for_budget(exp, run, emb, source, vocab, budget_s: float, probe_steps: int = 20) -> int:
    """Steps that fit ``budget_s``, from a timed probe (the first steps run slower: warm-up)."""
    _, seconds, _ = train_candidate(exp, run, emb, source, vocab, probe_steps)
    return max(probe_steps, int(budget_s / (seconds / probe_steps)))


# ---------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------

class HeldOut:
    """Validation rows, normalised with the training store's statistics, and their moments."""

    def __init__(self, path: str, emb: EmbeddingSettings, train_stats: dict, limit: int = 0):
        from elf.embed.normalise import normalise
        from elf.embed.reader import StoreSource
        from elf.evaluate.denoise import channel_moments

        source = StoreSource(path)
        rows = source.fetch(list(range(min(limit or len(source), len(source)))))
        self.x = normalise(rows["x"], train_stats, emb.normalization, emb.mean, emb.std).float()
        self.valid = rows["attention_mask"] > 0
        self.input_ids = rows["input_ids"].long()
        self.mean, self.var = channel_moments(self.x, self.valid)


def denoise_table(model, held: HeldOut, run: RunSettings, seed: int, times=TIMES) -> list[dict]:
    from elf.evaluate.denoise import denoise_errors

    return denoise_errors(model, held.x, held.valid, times, run.objective.noise_scale,
                          torch.Generator().manual_seed(seed), mean=held.mean, var=held.var,
                          prediction=run.model.prediction, t_eps=run.objective.t_eps)


@torch.no_grad()
def decode_ce(model, held: HeldOut, run: RunSettings, seed: int) -> float:
    """Cross-entropy of the decode branch on held-out rows at the training decode noise."""
    import torch.nn.functional as F

    from elf.flow.paths import interpolate, logit_normal

    s, g = run.objective, torch.Generator().manual_seed(seed)
    x = held.x
    lam = logit_normal(torch.randn(x.shape[:2], generator=g), s.decode_lambda_mean, s.decode_lambda_std)
    z = interpolate(x, torch.randn(x.shape, generator=g), lam, s.decode_noise_scale)
    ones = torch.ones(len(x))
    _, h = model(torch.cat([z, torch.zeros_like(z)], -1), ones, ones, ones)
    ce = F.cross_entropy(model.decode(h).transpose(1, 2), held.input_ids, reduction="none")
    return float(ce[held.valid].mean())


@torch.no_grad()
def generate(model, sampler: SamplerSettings, n: int, L: int, d: int, tokenizer, seed: int,
             batch_size: int = 64) -> list[str]:
    from elf.flow.samplers import decode_final, postprocess, rollout

    texts = []
    for k, lo in enumerate(range(0, n, batch_size)):
        g = torch.Generator().manual_seed(seed * 1_000_003 + k)
        z0 = sampler.noise_scale * torch.randn(min(batch_size, n - lo), L, d, generator=g)
        z, _ = rollout(model, sampler, z0, g)
        ids = postprocess(decode_final(model, z, sampler.sc_cfg).argmax(-1),
                          tokenizer.eos_token_id, tokenizer.pad_token_id)
        texts += [tokenizer.decode([i for i in row if i != tokenizer.pad_token_id],
                                   skip_special_tokens=True) for row in ids.tolist()]
    return texts


def text_metrics(texts: list[str], scorer) -> dict:
    from elf.evaluate.entropy import text_entropy
    from elf.evaluate.genppl import gen_ppl, scoring_context
    from elf.evaluate.repetition import repetition

    model, tokenizer = scorer
    context = scoring_context(model)
    ppl = gen_ppl(texts, model, tokenizer, batch_size=64, progress=False, max_length=context)
    from elf.data.recognize import grammar_scores
    from elf.evaluate.uncertainty import ratio_ppl_se

    grammar = grammar_scores(texts)
    ppl_se = ratio_ppl_se(ppl["per_sample_nll"], ppl["per_sample_tokens"])
    return dict(gen_ppl=ppl["gen_ppl"], gen_ppl_se=ppl_se,
                entropy=text_entropy(texts, tokenizer, context)["entropy"],
                repetition=repetition(texts)["repetition"], grammar=grammar["accepted"],
                one_tense=grammar["one_tense"])


def calibration(results: Path, tokenizer, scorer, n: int, seed: int) -> dict[str, dict]:
    """The lines a model is read against: held-out rows cut at their first EOS as samples are (and
    whole, as the DAG's Dataset line scored them before), the same rows shuffled, unigram draws."""
    from elf.evaluate.calibration import CORRUPTIONS, corrupt_rows
    from elf.evaluate.samples import read_text_column, reference_rows

    tokens = results / "data/owt/tokens"
    rows, _ = reference_rows(tokens, "test", n, tokenizer.eos_token_id, tokenizer.pad_token_id)
    decode = lambda rs: [tokenizer.decode(r, skip_special_tokens=True) for r in rs]  # noqa: E731
    lines = {"held-out text": text_metrics(decode(rows), scorer),
             "held-out, whole rows": text_metrics(read_text_column(tokens, ("test",), n)[0], scorer)}
    for how in CORRUPTIONS:
        lines[f"{how} text"] = text_metrics(decode(corrupt_rows(rows, how, seed)), scorer)
    return lines


# ---------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------

def main() -> None:
    args = parse_args()
    if args.from_json:
        for path in args.from_json:
            report = json.loads(Path(path).read_text())
            print(f"\n## {path}")
            print_table(list(report["candidates"].items()), report["calibration"], args)
        return
    if not args.candidates:
        raise SystemExit("name at least one candidate (or --from-json)")
    torch.set_num_threads(args.threads)
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.reader import StoreSource
    from elf.evaluate.scorer import load_scorer

    exp = parse_experiment(yaml.safe_load(Path(args.config).read_text()))
    results = Path(args.results or exp.results)
    tokenizer = load_tokenizer(str(results / "models/tokenizer"))
    scorer = load_scorer(results / "models/scorer")
    rows = []
    report = {"calibration": calibration(results, tokenizer, scorer, args.samples, args.seed),
              "candidates": {}}
    for text in args.candidates:
        name, overrides = parse_candidate(text)
        run, sampler = resolve(exp, args.run, overrides, args.sampler)
        emb = exp.embeddings[run.embedding]
        store = results / "embeddings" / run.dataset / run.embedding
        source = StoreSource(str(store / "train.zarr"))
        held = HeldOut(str(store / "validation.zarr"), emb, source.stats)
        monitor = None
        if args.eval_every:
            probe = HeldOut(str(store / "validation.zarr"), emb, source.stats, limit=64)

            def monitor(step, ema, run=run, probe=probe):
                if step % args.eval_every:
                    return {}
                net = build(exp, run, source, len(tokenizer))
                net.load_state_dict(ema.shadow)
                return {"heldout_ratio": [round(r["ratio"], 4) for r in
                                          denoise_table(net.eval(), probe, run, args.seed)]}
        steps = args.steps or steps_for_budget(exp, run, emb, source, len(tokenizer), args.budget_s)
        model, seconds, log = train_candidate(exp, run, emb, source, len(tokenizer), steps, monitor)
        table = denoise_table(model, held, run, args.seed)
        texts = generate(model, sampler, args.samples, source.seq_len, source.dim, tokenizer, args.seed)
        metrics = dict(steps=steps, train_s=seconds, decode_ce=decode_ce(model, held, run, args.seed),
                       ratios=[r["ratio"] for r in table], mse=[r["mse"] for r in table],
                       **text_metrics(texts, scorer))
        report["candidates"][name] = dict(overrides=overrides, sampler=sampler.__dict__, log=log,
                                          examples=texts[:3], **metrics)
        rows.append((name, dict(metrics, log=log)))
        print(f"[{name}] {steps} steps, {seconds:.0f} s; e.g. {texts[0][:100]!r}", flush=True)
    print_table(rows, report["calibration"], args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")


def print_table(rows, calib, args) -> None:
    ratio_cols = " ".join(f"t={t:<4}" for t in TIMES)
    print(f"\nsampler {args.sampler}, {args.samples} samples, EMA weights; L2 ratio = held-out x̂ "
          f"error / per-channel linear denoiser's\n")
    print(f"| {'candidate':<24} | steps | train s | L2 ratio {ratio_cols} | decode CE | Gen. PPL "
          f"| entropy | repetition | grammar | one tense |")
    print("|" + "---|" * 10)
    share = lambda m, k: "–" if m.get(k) is None else f"{m[k]:.3f}"  # noqa: E731 (older JSON: none)
    for name, m in rows:
        ratios = " ".join(f"{r:<6.3f}" for r in m["ratios"])
        print(f"| {name:<24} | {m['steps']:5d} | {m['train_s']:7.0f} | {'':8} {ratios} | "
              f"{m['decode_ce']:9.3f} | {m['gen_ppl']:8.1f} | {m['entropy']:7.3f} | "
              f"{m['repetition']:10.3f} | {share(m, 'grammar')} | {share(m, 'one_tense')} |")
    for name, m in calib.items():
        blank = " " * 8
        print(f"| {name:<24} |       |         | {blank} {'':{6 * len(TIMES) + len(TIMES) - 1}} | "
              f"{'':9} | {m['gen_ppl']:8.1f} | {m['entropy']:7.3f} | {m['repetition']:10.3f} | "
              f"{share(m, 'grammar')} | {share(m, 'one_tense')} |")
    for name, m in rows:
        print_trajectory(name, m.get("log", ()))


def print_trajectory(name: str, log) -> None:
    """The held-out L2 ratio per t over training (``--eval-every``), when the run recorded it."""
    points = [(line["step"], line["heldout_ratio"]) for line in log if "heldout_ratio" in line]
    if not points:
        return
    print(f"\n{name}: held-out L2 ratio over training (64 validation rows, EMA weights)\n")
    print("| step | " + " | ".join(f"t={t}" for t in TIMES) + " |")
    print("|" + "---|" * (len(TIMES) + 1))
    for step, ratios in points:
        print(f"| {step:5d} | " + " | ".join(f"{r:.3f}" for r in ratios) + " |")


if __name__ == "__main__":
    main()
