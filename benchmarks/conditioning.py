"""Benchmark: do conditional runs read their source? One table, variants side by side.

Each variant is a conditional task built in memory from the embedded corpora (``results/data/
corpora``): ``wmt`` (invented source language → English), ``copy`` (the English side as its own
source: the control that separates a defect in the conditional path from a task too hard for the
budget) or ``xsum`` (document → summary), packed as ``elf prepare`` packs it (``[source ; target]``,
the source cut at ``max_input_length``), embedded by the pipeline's frozen encoder (or one trained
here on both sides, ``encoder=both``) and normalised with the train rows' statistics. It trains
through the pipeline's loop (``elf.train.loop.train``, the loss covering the EOS padding), then, on
its EMA weights, on the test split:

- BLEU (translation, copy) or ROUGE-1/2/L (summarization) of the outputs at each input CFG scale;
- the source-blind calibration: the same outputs scored against *another* example's reference
  (references rolled by one), and the references themselves scored against another example's — what
  a model that writes the target language well but ignores the source gets;
- how much the source lowers the held-out x̂ error on target positions (1 − error with the source /
  error with the source zeroed, per t): 0 means the network does not read its source.

    snakemake --cores all results/data/corpora results/models/tokenizer results/models/encoder-main
    python benchmarks/conditioning.py --steps 500 copy wmt
    python benchmarks/conditioning.py --steps 1500 'wmt_long:task=wmt,max_length=64,max_input_length=32'
    python benchmarks/conditioning.py --from-json a.json

A variant is a preset name (``PRESETS``) or ``name:key=value,...``: ``task``, ``max_length``,
``max_input_length``, ``source_order`` (``svo``: wmt's source in the English clause order),
``pad_source`` (sources padded to ``max_input_length``: every target starts
at the same position), ``train_docs`` (the train split redrawn at that size), ``encoder``
(``main``, ``both`` or ``task``), ``encoder_steps``, ``vocab_size`` (retrain the tokenizer at that
size on all corpora), and dotted keys into the run's settings (``objective.label_drop_prob``,
``budget.steps``, ``model.size`` ...); values are YAML.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import yaml

from elf.config import RunSettings, deep_merge, from_dict
from elf.validate import parse_experiment

TIMES = (0.1, 0.3, 0.5, 0.7, 0.9)
TASKS = {"wmt": "translation", "copy": "translation", "xsum": "summarization"}
DATA_KEYS = ("task", "max_length", "max_input_length", "encoder", "encoder_steps", "vocab_size",
             "pad_source", "source_order", "train_docs")

PRESETS: dict[str, dict] = {
    "copy": {"task": "copy"},
    "wmt": {"task": "wmt"},
    "xsum": {"task": "xsum", "max_length": 96, "max_input_length": 72},
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("variants", nargs="*", help="preset names or name:key=value,...")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", help="results root (default: the config's)")
    p.add_argument("--run", default="wmt", help="the config run every variant overrides")
    p.add_argument("--steps", type=int, default=500, help="training steps")
    p.add_argument("--examples", type=int, default=64, help="test examples scored")
    p.add_argument("--split", default="test", choices=("train", "validation", "test"),
                   help="the split scored (train: how much of the training pairs the run memorised)")
    p.add_argument("--input-cfg", type=float, nargs="+", default=[1.0, 2.0])
    p.add_argument("--sampler", default="cond_cfg2", help="sampler name in the config (its input CFG "
                   "is replaced by each --input-cfg)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0, help="sampling / evaluation noise seed")
    p.add_argument("--json", help="also write every number to this JSON file")
    p.add_argument("--from-json", nargs="+", metavar="JSON", help="train nothing: print earlier tables")
    return p.parse_args()


def parse_variant(text: str) -> tuple[str, dict]:
    if ":" not in text:
        if text not in PRESETS:
            raise SystemExit(f"unknown preset {text!r}; presets: {', '.join(PRESETS)}")
        return text, dict(PRESETS[text])
    name, _, spec = text.partition(":")
    overrides = {}
    for item in filter(None, spec.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"variant {name!r}: {item!r} is not key=value")
        overrides[key.strip()] = yaml.safe_load(value)
    return name, overrides


def nested(overrides: dict) -> dict:
    out: dict = {}
    for key, value in overrides.items():
        if key in DATA_KEYS:
            continue
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


# ---------------------------------------------------------------------------------------------------
# Data: pairs → packed rows → embeddings, in memory
# ---------------------------------------------------------------------------------------------------

def pairs(corpora: Path, task: str, split: str, exp, source_order: str = "sov",
          train_docs: int | None = None) -> tuple[list[str], list[str]]:
    """(sources, targets) of one split, from the saved corpora or, for a wmt source in another order
    or a train split of ``train_docs`` documents, redrawn from the corpora seed (each split has its
    own seed: the same documents, and validation / test unchanged by ``train_docs``)."""
    import datasets

    from elf.data.corpora import build_corpus

    c = exp.corpora
    name = "xsum" if task == "xsum" else "wmt"
    sizes = {"train": train_docs or c.train_docs, "validation": c.validation_docs, "test": c.test_docs}
    if sizes[split] != getattr(c, f"{split}_docs") or (name == "wmt" and source_order != "sov"):
        rows = build_corpus(name, c.seed, {split: sizes[split]}, source_order, c.source_suffixes)[split]
    else:
        rows = datasets.load_from_disk(str(corpora / name))[split]
    if name == "xsum":
        return list(rows["document"]), list(rows["summary"])
    targets = [p["en"] for p in rows["translation"]]
    return ([p["de"] for p in rows["translation"]] if task == "wmt" else targets), targets


class MemorySource:
    """Packed rows and their embeddings (with and without the source), fetched by index."""

    def __init__(self, packed: dict, x: torch.Tensor, x_nosource: torch.Tensor, stats: dict):
        self.tokens = {k: torch.as_tensor(v) for k, v in packed.items()}
        self.x, self.x_nosource, self.stats = x, x_nosource, stats
        self.conditional = True
        self.dim, self.seq_len = x.shape[2], x.shape[1]
        self.store_identity, self.tokens_fingerprint = None, None

    def __len__(self) -> int:
        return len(self.x)

    def fetch(self, indices) -> dict:
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        batch = {k: self.tokens[k][idx] for k in ("input_ids", "attention_mask", "cond_seq_mask")}
        batch.update(x=self.x[idx].clone(), x_nosource=self.x_nosource[idx].clone())
        return batch


@torch.no_grad()
def embed_rows(embedder, packed: dict, batch: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    cols = [torch.as_tensor(packed[c]).long() for c in ("input_ids", "attention_mask", "cond_seq_mask")]
    xs, xn = [], []
    for lo in range(0, len(cols[0]), batch):
        part = [c[lo:lo + batch] for c in cols]
        n = len(part[0])
        xs.append(embedder(*part, torch.zeros(n, dtype=torch.bool)).float())
        xn.append(embedder(*part, torch.ones(n, dtype=torch.bool)).float())
    return torch.cat(xs), torch.cat(xn)


def build_task(exp, results: Path, data: dict, tokenizer, embedder) -> dict:
    from elf.data.pack import pack_conditional
    from elf.embed.normalise import normalisation_stats

    out = {}
    for split in ("train", "validation", "test"):
        sources, targets = pairs(results / "data/corpora", data["task"], split, exp,
                                 data["source_order"], data["train_docs"])
        packed = pack_conditional(sources, targets, tokenizer, data["max_length"],
                                  data["max_input_length"], pad_source=data["pad_source"])
        x, x_nosource = embed_rows(embedder, packed)
        out[split] = dict(packed=packed, x=x, x_nosource=x_nosource, sources=sources, targets=targets)
    train = out["train"]
    out["stats"] = normalisation_stats(train["x"], torch.as_tensor(train["packed"]["attention_mask"]))
    lengths = [len(s) for s in tokenizer([*train["sources"][:500]], add_special_tokens=False)["input_ids"]]
    out["source_cut_share"] = float(np.mean([n > data["max_input_length"] for n in lengths]))
    tl = [len(s) for s in tokenizer([*train["targets"][:500]], add_special_tokens=False)["input_ids"]]
    out["target_cut_share"] = float(np.mean([n + 1 > data["max_length"] - data["max_input_length"]
                                             for n in tl]))
    return out


def retrain_tokenizer(results: Path, vocab_size: int):
    from elf.data.tokenizer import corpus_texts, train_tokenizer

    return train_tokenizer(corpus_texts(results / "data/corpora"), vocab_size)


def encoder_for(exp, results: Path, data: dict, tokenizer, tmp: Path) -> str:
    """The path of the frozen encoder the variant embeds with: the pipeline's (trained on owt), or
    one trained here with the same settings on owt, on every corpus's train text (``both``:
    owt, both sides of wmt, xsum documents and summaries) or on the task's own packed train rows
    (``task``: source and target, as an encoder with ``dataset: wmt`` trains in the DAG)."""
    if data.get("encoder", "main") == "main" and not data.get("vocab_size"):
        return str(results / "models/encoder-main")
    import datasets

    from elf.data.pack import pack_unconditional
    from elf.data.tokenizer import corpus_texts
    from elf.embed.encoder import train_encoder
    from elf.stages.encoder import span_corruption_batches

    settings = exp.encoders["main"]
    if data.get("encoder_steps"):
        settings = replace(settings, steps=int(data["encoder_steps"]))
    if data.get("encoder", "main") == "task":  # the task's own packed train rows, both sides
        from elf.data.pack import pack_conditional

        sources, targets = pairs(results / "data/corpora", data["task"], "train", exp,
                                 data["source_order"], data["train_docs"])
        packed = pack_conditional(sources, targets, tokenizer, data["max_length"],
                                  data["max_input_length"], pad_source=data["pad_source"])
    else:
        if data.get("encoder", "main") == "both":
            texts = list(corpus_texts(results / "data/corpora"))
        else:
            texts = list(datasets.load_from_disk(str(results / "data/corpora/owt"))["train"]["text"])
        packed = pack_unconditional(texts, tokenizer, exp.datasets["owt"].max_length)
    batches = span_corruption_batches(packed, settings, len(tokenizer))
    try:
        encoder = train_encoder(settings, tokenizer, batches, progress=False)
    finally:
        batches.close()
    encoder.save_pretrained(tmp / "encoder")
    return str(tmp / "encoder")


# ---------------------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------------------

def train_variant(exp, run: RunSettings, source, vocab: int, steps: int):
    from elf.embed.reader import ShuffledBatches
    from elf.model import ELF, run_model_config
    from elf.train.checkpoint import load_model
    from elf.train.loop import train

    run = replace(run, budget=replace(run.budget, steps=steps, checkpoint_every=10 ** 9))
    cfg = run_model_config(run.model, exp.sizes, d=source.dim, vocab_size=vocab, max_length=source.seq_len)
    torch.manual_seed(run.budget.seed)
    model = ELF(cfg)
    emb = exp.embeddings[run.embedding]
    batches = ShuffledBatches(source, run.budget.batch_size, seed=run.budget.seed,
                              normalization=emb.normalization, mean=emb.mean, std=emb.std, prefetch=0)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train(model, run, batches, Path(tmp), {"model": cfg.__dict__, "run": {}},
              loss_covers_padding=True, seq_shape=(source.seq_len, source.dim), progress=False)
        seconds = time.perf_counter() - start
        ema_model, _ = load_model(Path(tmp), "ema")
        log = [json.loads(line) for line in (Path(tmp) / "train_log.jsonl").read_text().splitlines()]
    return ema_model.eval(), seconds, log


@torch.no_grad()
def source_gain(model, x, src, valid, noise_scale: float, seed: int, t_eps: float) -> list[float]:
    """Per t: 1 − (x̂ error on target positions with the source) / (with the source zeroed)."""
    from elf.flow.paths import interpolate, x_from_output

    g = torch.Generator().manual_seed(seed)
    target = valid & ~src
    gains = []
    for t in TIMES:
        tb = torch.full((len(x),), t)
        z = interpolate(x, torch.randn(x.shape, generator=g), tb, noise_scale)
        errs = []
        for keep in (True, False):
            fill = x if keep else torch.zeros_like(x)
            zz = torch.where(src[..., None], fill, z)
            sc = torch.where(src[..., None], fill, torch.zeros_like(x))
            out, _ = model(torch.cat([zz, sc], -1), tb, torch.ones(len(x)))
            x_hat = x_from_output(out, zz, tb, "x", t_eps, noise_scale)
            errs.append(float((x_hat - x).pow(2).mean(-1)[target].mean()))
        gains.append(1 - errs[0] / errs[1])
    return gains


@torch.no_grad()
def generate(model, sampler, split: dict, x: torch.Tensor, tokenizer, n: int, target_tokens: int,
             seed: int) -> list[str]:
    from elf.flow.samplers import Source, decode_final, postprocess, rollout

    packed = split["packed"]
    mask = torch.as_tensor(packed["cond_seq_mask"][:n]) > 0
    g = torch.Generator().manual_seed(seed)
    z0 = sampler.noise_scale * torch.randn(x[:n].shape, generator=g)
    z, _ = rollout(model, sampler, z0, g, source=Source(mask, x[:n]))
    ids = postprocess(decode_final(model, z, sampler.sc_cfg).argmax(-1), tokenizer.eos_token_id,
                      tokenizer.pad_token_id, source_length=torch.as_tensor(packed["source_length"][:n]),
                      target_length=target_tokens)
    eos = tokenizer.eos_token_id
    return [tokenizer.decode([t for t in (r[:r.index(eos)] if eos in r else r)],
                             skip_special_tokens=True) for r in ids.tolist()]


def task_scores(task: str, hyps: list[str], refs: list[str]) -> dict:
    from elf.evaluate.source_blind import source_blind_scores

    return source_blind_scores(TASKS[task], hyps, refs)


def evaluate_variant(model, exp, run, sampler, data: dict, built: dict, tokenizer, args) -> dict:
    from elf.embed.normalise import normalise

    emb = exp.embeddings[run.embedding]
    norm = lambda t: normalise(t, built["stats"], emb.normalization, emb.mean, emb.std)  # noqa: E731
    val = built["validation"]
    k = min(128, len(val["x"]))
    packed = val["packed"]
    gains = source_gain(model, norm(val["x"][:k]), torch.as_tensor(packed["cond_seq_mask"][:k]) > 0,
                        torch.as_tensor(packed["attention_mask"][:k]) > 0, run.objective.noise_scale,
                        args.seed, run.objective.t_eps)
    test = built[args.split]
    n = min(args.examples, len(test["x"]))
    refs = test["targets"][:n]
    target_tokens = data["max_length"] - data["max_input_length"]
    by_cfg, examples = {}, []
    for cfg in args.input_cfg:
        s = replace(sampler, input_cfg=cfg)
        hyps = generate(model, s, test, norm(test["x"]), tokenizer, n, target_tokens, args.seed)
        by_cfg[str(cfg)] = task_scores(data["task"], hyps, refs)
        examples.append(dict(input_cfg=cfg, source=test["sources"][0][:120], reference=refs[0],
                             output=hyps[0]))
    return dict(source_gain=gains, scores=by_cfg, examples=examples)


# ---------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------

def main() -> None:
    args = parse_args()
    if args.from_json:
        for path in args.from_json:
            print(f"\n## {path}")
            print_table(json.loads(Path(path).read_text())["variants"])
        return
    if not args.variants:
        raise SystemExit("name at least one variant (or --from-json)")
    torch.set_num_threads(args.threads)
    from elf.data.tokenizer import load_tokenizer
    from elf.embed.kinds import build_embedder

    exp = parse_experiment(yaml.safe_load(Path(args.config).read_text()))
    results = Path(args.results or exp.results)
    report = {"args": vars(args), "variants": {}}
    for text in args.variants:
        name, overrides = parse_variant(text)
        base = deep_merge(exp.run_defaults, exp.runs[args.run])
        run = from_dict(RunSettings, deep_merge(base, nested(overrides)), f"variant {name}")
        ds = exp.datasets[run.dataset]
        data = dict(task=overrides.get("task", "wmt"),
                    max_length=overrides.get("max_length", ds.max_length),
                    max_input_length=overrides.get("max_input_length", ds.max_input_length),
                    encoder=overrides.get("encoder", "main"),
                    encoder_steps=overrides.get("encoder_steps"), vocab_size=overrides.get("vocab_size"),
                    pad_source=bool(overrides.get("pad_source", False)),
                    source_order=overrides.get("source_order", "sov"),
                    train_docs=overrides.get("train_docs"))
        steps = int(overrides.get("budget.steps", args.steps))
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = (retrain_tokenizer(results, data["vocab_size"]) if data["vocab_size"]
                         else load_tokenizer(str(results / "models/tokenizer")))
            encoder = encoder_for(exp, results, data, tokenizer, Path(tmp))
            embedder = build_embedder(exp.embeddings[run.embedding], encoder, len(tokenizer))
            built = build_task(exp, results, data, tokenizer, embedder)
        prep_s = time.perf_counter() - start
        source = MemorySource(built["train"]["packed"], built["train"]["x"],
                              built["train"]["x_nosource"], built["stats"])
        model, seconds, log = train_variant(exp, run, source, len(tokenizer), steps)
        sampler = exp.samplers[args.sampler]
        result = evaluate_variant(model, exp, run, sampler, data, built, tokenizer, args)
        report["variants"][name] = dict(overrides=overrides, data=data, steps=steps, train_s=seconds,
                                        prep_s=prep_s, source_cut_share=built["source_cut_share"],
                                        target_cut_share=built["target_cut_share"],
                                        final_loss=log[-1] if log else None, **result)
        ex = result["examples"][-1]
        print(f"[{name}] {steps} steps, {seconds:.0f} s train, {prep_s:.0f} s data; "
              f"src {ex['source']!r} → {ex['output']!r} (ref {ex['reference']!r})", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print_table(report["variants"])


def print_table(variants: dict) -> None:
    print("\nscore / source-blind (outputs vs another example's reference) / reference-blind "
          "(references vs another's); source gain = 1 − x̂ error with source / without, per t\n")
    gain_cols = " ".join(f"t={t:<4}" for t in TIMES)
    print(f"| variant | steps | train s | src cut | input CFG | metric | score | source-blind | "
          f"refs blind | ratio | source gain {gain_cols} |")
    print("|" + "---|" * 11)
    for name, v in variants.items():
        gains = " ".join(f"{g:<6.3f}" for g in v["source_gain"])
        for cfg, sc in v["scores"].items():
            for metric in sc["metrics"]:
                m = sc["metrics"][metric]
                ratio = m["score"] / max(m["source_blind"], 1e-9)
                print(f"| {name} | {v['steps']} | {v['train_s']:.0f} | {v['source_cut_share']:.2f} | "
                      f"{cfg} | {metric} | {m['score']:.2f} | {m['source_blind']:.2f} | "
                      f"{m['reference_blind']:.2f} | {ratio:.1f} | {gains} |")


if __name__ == "__main__":
    main()
