"""Does the replication review's verdict work? Its three rates on a CI-sized world, in one table.

A real, tiny pipeline (no download): a word-level tokenizer over w3 … w31, rows drawn from a Markov
chain on those words, a tiny GPT-2 scorer trained on such rows (elf/evaluate/scorer.py), and two
tiny ELF denoisers trained on them (elf/train/loop.py): a full run and one with a fraction of its
steps. Both are evaluated by ``elf evaluate`` (sample, score, aggregate) on evaluation seeds A and B.
Then (elf/report/review.py, elf/report/verdict.py):

- **self-replication**: evaluation A of the full run becomes the "paper values" (Table 10 entries of
  ELF-B: no printed SE, so the review assumes ours); evaluation B of the same checkpoint, on other
  seeds, is reviewed against them — the share read *consistent* (a faithful run passes);
- **sensitivity**: the short run's evaluation B against the same values — the share of its Gen. PPL
  comparisons read *inconsistent* (a broken run fails);
- **identity**: every value of ``config/paper_values.yaml`` that maps to a run of ours, fed in as
  ours with the paper's own SE — the share read *consistent* (the matching and the rule agree on
  equal numbers).

    python benchmarks/verdict.py                    # ≈ 1–2 min on 2 CPU cores
    python benchmarks/verdict.py --work /tmp/v --steps 400 --n 64
tests/test_verdict_rates.py runs the same functions (smaller) and asserts the rates.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")   # the scorer's progress bars (read when tqdm loads)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from elf.cli import main as elf_main  # noqa: E402
from elf.report import review  # noqa: E402
from elf.report.paper import load_paper_values, paper_points  # noqa: E402
from elf.report.results import metric_columns  # noqa: E402
from elf.report.verdict import CONSISTENT, INCONSISTENT  # noqa: E402

VOCAB, LENGTH, DIM = 32, 12, 16
SHAPE = dict(depth=2, width=64, heads=4, d=DIM, bottleneck=8, vocab_size=VOCAB, max_length=LENGTH)
SAMPLERS = {  # name: settings (all logit-normal grid, the grid every paper value uses)
    "ode4_w1": dict(method="ode", steps=4, sc_cfg=1.0),
    "ode8_w1": dict(method="ode", steps=8, sc_cfg=1.0),
    "ode8_w2": dict(method="ode", steps=8, sc_cfg=2.0),
    "sde4_w1": dict(method="sde", steps=4, gamma=1.0, sc_cfg=1.0),
    "sde8_w1": dict(method="sde", steps=8, gamma=1.0, sc_cfg=1.0),
    "sde8_w2": dict(method="sde", steps=8, gamma=1.0, sc_cfg=2.0),
}
SEEDS_A, SEEDS_B = (0, 1, 2), (3, 4, 5)


# --------------------------------------------------------------------------------------------------
# The world: tokenizer, rows, scorer, two checkpoints
# --------------------------------------------------------------------------------------------------

def markov_rows(n: int, seed: int) -> np.ndarray:
    """(n, LENGTH) ids in 3 … VOCAB−1: each token is the previous + 1 or + 2 (wrapping)."""
    rng = np.random.default_rng(seed)
    rows = np.empty((n, LENGTH), dtype=np.int64)
    rows[:, 0] = rng.integers(3, VOCAB, n)
    for t in range(1, LENGTH):
        rows[:, t] = 3 + (rows[:, t - 1] - 3 + rng.integers(1, 3, n)) % (VOCAB - 3)
    return rows


def texts_of(rows: np.ndarray) -> list[str]:
    return [" ".join(f"w{t}" for t in row) for row in rows]


def build_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)


def build_scorer(path: Path, steps: int = 150) -> None:
    from elf.config import ScorerSettings
    from elf.evaluate.scorer import save_scorer, train_bpe_tokenizer, train_scorer_model

    texts = texts_of(markov_rows(400, seed=100))
    settings = ScorerSettings(vocab_size=128, layers=1, width=32, heads=2, steps=steps, batch_size=16,
                              context=32, lr=3e-3, seed=0)
    tokenizer = train_bpe_tokenizer(texts, settings.vocab_size, settings.context)
    model, _ = train_scorer_model(texts, tokenizer, settings, progress=False)
    save_scorer(model, tokenizer, path, {"note": "benchmarks/verdict.py"})


class Rows:
    """The training rows in one seeded order, as the training loop reads batches (resumable)."""

    def __init__(self, data: dict, batch_size: int, seed: int = 0):
        self.data, self.batch_size, self.seed, self.position = data, batch_size, seed, 0

    def __iter__(self):
        n = len(self.data["input_ids"])
        while True:
            g = torch.Generator().manual_seed(self.seed + self.position)
            idx = torch.randint(0, n, (self.batch_size,), generator=g)
            self.position += 1
            yield {k: v[idx] for k, v in self.data.items()}

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def build_checkpoint(path: Path, steps: int, batch_size: int = 16, lr: float = 3e-3) -> None:
    """A tiny ELF trained ``steps`` steps on the chain's rows (embedding: a fixed random table)."""
    from elf.config import (BudgetSettings, DatasetSettings, EmbeddingSettings, ObjectiveSettings,
                            OptimSettings, RunSettings, to_dict)
    from elf.model import ELF, model_config
    from elf.train.checkpoint import model_meta
    from elf.train.loop import train

    ids = torch.from_numpy(markov_rows(512, seed=7))
    table = torch.randn(VOCAB, DIM, generator=torch.Generator().manual_seed(0))
    data = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                cond_seq_mask=torch.zeros_like(ids), x=table[ids])
    torch.manual_seed(0)
    model = ELF(model_config("ELF-B", **SHAPE))
    run = RunSettings(dataset="toy", optim=OptimSettings(blr=lr * 256 / batch_size, ema_warmup=True),
                      objective=ObjectiveSettings(),
                      budget=BudgetSettings(batch_size=batch_size, steps=steps, log_every=max(1, steps)))
    dataset = DatasetSettings(task="unconditional", source="embedded", name="toy", max_length=LENGTH)
    meta = model_meta(model.cfg, run=to_dict(run), dataset=to_dict(dataset),
                      embedding=to_dict(EmbeddingSettings()))
    train(model, run, Rows(data, batch_size), path, meta, loss_covers_padding=False,
          seq_shape=(LENGTH, DIM), progress=False)


def evaluate(work: Path, checkpoint: str, seeds, n: int, name: str) -> dict[str, dict]:
    """``elf evaluate`` of every sampler on ``seeds``: {sampler: aggregate}."""
    plan = dict(run=checkpoint, task="unconditional", n=n, batch_size=n, score_batch_size=64,
                precision="fp32",
                samplers={s: dict(settings={**v, "grid": "logit_normal"}, seeds=list(seeds), split=None)
                          for s, v in SAMPLERS.items()})
    out = work / "evals" / name
    code = elf_main(["evaluate", "--plan", json.dumps(plan), "--checkpoint", str(work / checkpoint),
                     "--tokenizer", str(work / "tok"), "--scorer", str(work / "scorer"),
                     "--device", "cpu", "--out-dir", str(out), "--no-progress"])
    if code != 0:
        raise SystemExit(f"elf evaluate failed for {name}")
    return {s: json.loads((out / "aggregates" / f"{s}.json").read_text()) for s in SAMPLERS}


def build_world(work: Path, steps: int = 300, fraction: float = 0.05, n: int = 48) -> dict:
    """Every evaluation the three rates need: {"full_a", "full_b", "short_b"} → {sampler: aggregate}."""
    work.mkdir(parents=True, exist_ok=True)
    build_tokenizer(work / "tok")
    build_scorer(work / "scorer")
    build_checkpoint(work / "full", steps)
    build_checkpoint(work / "short", max(1, int(steps * fraction)))
    return {"full_a": evaluate(work, "full", SEEDS_A, n, "full_a"),
            "full_b": evaluate(work, "full", SEEDS_B, n, "full_b"),
            "short_b": evaluate(work, "short", SEEDS_B, n, "short_b")}


# --------------------------------------------------------------------------------------------------
# Paper values from an evaluation, our rows from another, and the rates
# --------------------------------------------------------------------------------------------------

def as_paper_values(aggregates: dict[str, dict]) -> dict:
    """One evaluation as the paper's Table 10 (ELF-B → R01): Gen. PPL and entropy, no SE printed."""
    entries = []
    for sampler, aggregate in aggregates.items():
        s, m = SAMPLERS[sampler], aggregate["metrics"]
        entries.append({"src": "T10", "model": "ELF-B", "sampler": s["method"], "steps": s["steps"],
                        "gamma": s.get("gamma", 0.0), "sc_cfg": s["sc_cfg"],
                        "gen_ppl": m["gen_ppl"]["mean"], "entropy": m["entropy"]["mean"]})
    return {"table_10": {"entries": entries}}


def our_rows(aggregates: dict[str, dict], run: str = "R01") -> pd.DataFrame:
    """Our rows as the review reads them (``elf.report.results``), for paper run R01."""
    rows = []
    for sampler, aggregate in aggregates.items():
        s = SAMPLERS[sampler]
        rows.append({"run": run, "paper_run": "R01", "sampler": sampler, "task": "unconditional",
                     "method": s["method"], "steps": s["steps"], "gamma": s.get("gamma", 0.0),
                     "sc_cfg": s["sc_cfg"], "input_cfg": 1.0, "grid": "logit_normal", "split": None,
                     **metric_columns(aggregate["metrics"]), "aggregate_path": f"{run}/{sampler}"})
    return pd.DataFrame(rows)


def review_against(paper_aggregates: dict, ours: dict, run: str) -> pd.DataFrame:
    return review.compare(our_rows(ours, run), paper_points(as_paper_values(paper_aggregates)))


def identity_comparisons(paper_values: dict) -> pd.DataFrame:
    """Each paper value of a run of ours, fed in as ours (its own SE as ours), compared with itself."""
    points = paper_points(paper_values)
    points = points[points["paper_run"].notna()]
    out = []
    for _, p in points.iterrows():
        row = {"run": p["paper_run"], "paper_run": p["paper_run"], "sampler": "as_printed",
               "task": {"wmt14_de_en": "translation", "xsum": "summarization"}.get(p["task"],
                                                                                  "unconditional"),
               "method": p["method"], "steps": p["steps"],
               "gamma": p["gamma"] if pd.notna(p["gamma"]) else 0.0, "sc_cfg": p["sc_cfg"],
               "input_cfg": p["input_cfg"] if pd.notna(p["input_cfg"]) else 1.0,
               "grid": "logit_normal", "split": p["split"] if isinstance(p["split"], str) else None,
               p["metric"]: p["value"], f"{p['metric']}_sample_se": p["se"], "aggregate_path": "paper"}
        out.append(review.compare(pd.DataFrame([row]), points[points["point"] == p["point"]]))
    return pd.concat(out, ignore_index=True)


def share(comparisons: pd.DataFrame, verdict: str) -> float:
    return float((comparisons["verdict"] == verdict).mean()) if len(comparisons) else math.nan


def rates(world: dict, paper_values: dict) -> list[dict]:
    """The three rates, each with what it counts."""
    replication = review_against(world["full_a"], world["full_b"], "full")
    weak = review_against(world["full_a"], world["short_b"], "short")
    weak_ppl = weak[weak["metric"] == "gen_ppl"]
    identity = identity_comparisons(paper_values)
    return [
        {"property": "self-replication", "verdict": CONSISTENT, "rate": share(replication, CONSISTENT),
         "n": len(replication), "wanted": "≥ 90 %", "comparisons": replication},
        {"property": "sensitivity (Gen. PPL)", "verdict": INCONSISTENT,
         "rate": share(weak_ppl, INCONSISTENT), "n": len(weak_ppl), "wanted": "100 %",
         "comparisons": weak},
        {"property": "identity", "verdict": CONSISTENT, "rate": share(identity, CONSISTENT),
         "n": len(identity), "wanted": "100 %", "comparisons": identity},
    ]


def table(results: list[dict]) -> str:
    lines = ["| Property | Reads | Rate | Comparisons | Wanted |", "|---|---|---|---|---|"]
    lines += [f"| {r['property']} | {r['verdict']} | {r['rate']:.0%} | {r['n']} | {r['wanted']} |"
              for r in results]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", help="folder for the world (default: a temporary one)")
    p.add_argument("--steps", type=int, default=300, help="training steps of the full run")
    p.add_argument("--fraction", type=float, default=0.05, help="the short run's share of them")
    p.add_argument("--n", type=int, default=48, help="samples per evaluation seed")
    p.add_argument("--paper-values", default=str(ROOT / "config" / "paper_values.yaml"))
    p.add_argument("--verbose", action="store_true", help="print every comparison")
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        results = rates(build_world(work, args.steps, args.fraction, args.n),
                        load_paper_values(args.paper_values))
    print(table(results))
    if args.verbose:
        columns = ["point", "sampler", "metric", "paper", "ours", "ours_se", "diff", "band", "verdict"]
        for r in results[:2]:
            print(f"\n{r['property']}:\n" + r["comparisons"][columns].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

