"""Benchmark: how each data stage's peak memory and wall time grow with its input, extrapolated to the paper.

For each stage (prepare, embed, the training reader at a fixed step count, R06's encoder at a fixed step
count, sample, score, aggregate) it builds generated inputs at 1x, 4x and 16x a base size, runs the stage
as the DAG does (``elf <stage>`` in its own process, one torch thread; the reader through
``ShuffledBatches`` as ``elf train`` uses it), and samples that process tree's resident memory every
20 ms from /proc (``_memory_kb``): ``anon`` (Pss_Anon: heap, tensors; what a stage holds) and ``rss``
(Pss, also counting the pages of memory-mapped files, which the kernel may drop). It prints one row per stage and
size (peak anon / rss MB, wall s, units of data), then per stage the growth of peak anon memory (largest
/ smallest size, and the log-log slope) and of time (the exponent k of wall = a + b * size^k from the
increments between the three geometric sizes, so the fixed start-up cost a drops out), and the
extrapolation to the paper's sizes (``PAPER`` below) at the largest size's rate (units per wall
second, start-up included: an upper bound): single-core CPU-hours here, and node-hours under
slurm/config.yaml's job cores for the stages that run on CPU there. Stages whose cost at paper scale
is the GPU model's (embed, encoder, sample, score) are extrapolated for their data path only (the
encoder: its span corruption, one core); the table says which.
The report/review stage is not here: it reads the aggregates (one small JSON per (run, sampler), a
count the config fixes), not data that grows with the datasets.

A streaming stage shows peak anon memory flat within 10 % and a time exponent near 1 (the reader and
the encoder run a fixed step count: no growth). The tiny networks (T5, ELF and GPT-2 of width 32)
make the data path, not the network, the measured cost.

    python benchmarks/scaling.py                        # about 10 min on 2 idle cores
    python benchmarks/scaling.py --base-docs 200 --sizes 1 4 --stages prepare embed   # a quick look
    python benchmarks/scaling.py --json results.json    # also write the rows
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("prepare", "embed", "reader", "encoder", "sample", "score", "aggregate")
L = 256            # packed row length of the generated data (the paper: 1024)
ENC_D = 32         # width of the random T5 encoder (the embedding width d; the paper: 512)
READER_STEPS, READER_BATCH = 60, 64
ENCODER_STEPS, ENCODER_BATCH = 12, 16
SEEDS = (0, 1)     # sample / score / aggregate: two seeds (the paper: six)

# The paper's sizes (config/paper.yaml; OpenWebText as the authors tokenised it).
OWT_ROWS, OWT_TOKENS = 8.8e6, 9.04e9
PAPER_D, PAPER_L = 512, 1024
PAPER = {  # stage: (paper units, what they are, Slurm job cores (slurm/config.yaml), runs on)
    "prepare": (OWT_TOKENS, "OWT tokens", 8, "cpu"),
    "embed": (OWT_TOKENS, "OWT tokens", 8, "gpu"),
    "reader": (95000 * 512, "rows of R01's 95K steps x 512 (each read alone: one 1 MB chunk)", 32, "gpu"),
    "encoder": (95000, "R06 steps of 512 x 1024 tokens (span corruption on the CPU)", 8, "gpu"),
    "sample": (6 * 1000 * PAPER_L, "tokens of 1000 samples x 6 seeds, one (run, sampler)", 8, "gpu"),
    "score": (6 * 1000, "samples (6 seeds x 1000)", 8, "gpu"),
    "aggregate": (6 * 11334, "per-sample rows (6 seeds x the XSum test set)", 1, "cpu"),
}


# --------------------------------------------------------------------------------------------------
# Measuring one process tree
# --------------------------------------------------------------------------------------------------

def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return pids


def _memory_kb(pids: list[int]) -> tuple[int, int]:
    """Proportional anon and total resident memory (Pss_Anon, Pss) of the processes, each address
    space once: a child between vfork and exec (``code_version`` runs git) shares its parent's, and
    a forked worker's copy-on-write pages are split between the two (PSS), so neither counts twice."""
    anon = total = 0
    seen = set()
    for p in dict.fromkeys(pids):  # a pid listed twice is read once (its RSS may move between reads)
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line and not line[0].isdigit())
            with open(f"/proc/{p}/stat") as fh:
                vsize = fh.read().rsplit(")", 1)[1].split()[20]
        except (OSError, IndexError):
            continue
        space = (vsize, fields.get("Rss"))
        if space in seen:
            continue
        seen.add(space)
        anon += int(fields.get("Pss_Anon", "0 kB").split()[0])
        total += int(fields.get("Pss", "0 kB").split()[0])
    return anon, total


def measure(cmd: list[str]) -> dict:
    """Run ``cmd`` (one torch thread, the worktree's ``elf``); its peak anon / total RSS (MB) and wall s."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # The stage's output goes to a file: a pipe read only at the end blocks a stage that prints more
    # than the pipe holds (64 KB), and the stage then waits for ever.
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        peak_anon = peak_rss = 0
        try:
            while proc.poll() is None:
                anon, rss = _memory_kb(_tree(proc.pid))
                peak_anon, peak_rss = max(peak_anon, anon), max(peak_rss, rss)
                time.sleep(0.02)
        finally:  # interrupted (Ctrl-C): the stage does not run on alone
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wall = time.perf_counter() - start
        log.seek(0)
        output = log.read()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n{output[-3000:]}")
    return dict(anon_mb=peak_anon / 1024, rss_mb=peak_rss / 1024, wall_s=wall)


def elf(*args: str) -> list[str]:
    return [sys.executable, "-m", "elf", *args]


# --------------------------------------------------------------------------------------------------
# Generated inputs (not measured)
# --------------------------------------------------------------------------------------------------

def build_models(work: Path, texts: list[str]) -> dict:
    """A tokenizer, a random T5 encoder, a random ELF checkpoint and a tiny GPT-2 scorer (all local)."""
    import torch

    from elf.config import EncoderSettings
    from elf.data.tokenizer import train_tokenizer
    from elf.embed.encoder import N_SENTINELS, build_t5, encoder_part

    tokenizer = train_tokenizer(texts[:2000], 2000)
    tokenizer.save_pretrained(str(work / "tokenizer"))
    torch.manual_seed(0)
    t5 = build_t5(EncoderSettings(d_model=ENC_D, layers=1, heads=2, d_ff=64), len(tokenizer) + N_SENTINELS)
    encoder_part(t5).save_pretrained(str(work / "encoder"))
    tokenizer.save_pretrained(str(work / "encoder"))
    _checkpoint(work / "run", work / "tokenizer", len(tokenizer))
    return dict(tokenizer=work / "tokenizer", encoder=work / "encoder", run=work / "run",
                vocab=len(tokenizer))


def _checkpoint(path: Path, tokenizer: Path, vocab: int) -> None:
    import torch

    from elf.artifacts import tokenizer_sha256
    from elf.config import DatasetSettings, EmbeddingSettings, RunSettings, to_dict
    from elf.model import ELF, model_config
    from elf.train.checkpoint import model_meta, save_final

    torch.manual_seed(0)
    model = ELF(model_config("ELF-B", depth=1, width=32, heads=2, d=ENC_D, bottleneck=8, vocab_size=vocab,
                             max_length=L))
    dataset = DatasetSettings(task="unconditional", source="local", name="owt", max_length=L)
    meta = model_meta(model.cfg, run=to_dict(RunSettings(dataset="owt")), dataset=to_dict(dataset),
                      embedding=to_dict(EmbeddingSettings()), tokenizer=str(tokenizer),
                      tokenizer_sha256=tokenizer_sha256(tokenizer))
    save_final(path, model.state_dict(), model.state_dict(), meta)


def write_corpus(path: Path, docs: int, seed: int = 0) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_prepare import synthetic_corpus

    texts = synthetic_corpus(docs, 150, seed)
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return texts


# --------------------------------------------------------------------------------------------------
# The stages at one size
# --------------------------------------------------------------------------------------------------

def run_size(stages: tuple[str, ...], work: Path, models: dict, scale: int, base_docs: int,
             base_samples: int, scorer: Path | None) -> list[dict]:
    """Every stage at ``scale`` x the base; each row: stage, scale, units, measurements."""
    d = work / f"x{scale}"
    d.mkdir()
    rows = []

    def record(stage, cmd, units):
        if stage in stages:
            result = measure(cmd)
            rows.append(dict(stage=stage, scale=scale, units=units() if callable(units) else units,
                             **result))
            print(f"  {stage:<9} x{scale:<3} anon {result['anon_mb']:7.0f} MB  rss {result['rss_mb']:7.0f} MB"
                  f"  {result['wall_s']:6.1f} s", flush=True)

    write_corpus(d / "corpus.jsonl", base_docs * scale, seed=scale)
    tokens = d / "tokens"
    settings = dict(task="unconditional", source="local", name=str(d / "corpus.jsonl"), max_length=L)
    prepare = elf("prepare", "--settings", json.dumps(settings), "--tokenizer", str(models["tokenizer"]),
                  "--carve-docs", "20", "--out", str(tokens))
    if "prepare" in stages:
        record("prepare", prepare, lambda: _prepared_tokens(tokens))
    else:
        measure(prepare)
    store = d / "train.zarr"
    embed = elf("embed", "--settings", json.dumps({"kind": "encoder", "dtype": "float16"}), "--encoder",
                str(models["encoder"]), "--tokens", str(tokens), "--split", "train", "--out", str(store),
                "--batch-size", "64", "--device", "cpu", "--chunk-sequences", "1",
                "--block-sequences", "64")  # many blocks and one row a chunk, as OWT's 1 MB rows get
    if {"embed", "reader"} & set(stages):
        record("embed", embed, lambda: _train_rows(tokens) * L)
        if "embed" not in stages:
            measure(embed)
    record("reader", [sys.executable, str(Path(__file__).resolve()), "--reader-probe", str(store)],
           READER_STEPS * READER_BATCH)
    encoder = dict(d_model=ENC_D, layers=1, heads=2, d_ff=64, steps=ENCODER_STEPS, batch_size=ENCODER_BATCH,
                   warmup_steps=2, checkpoint_every=5)
    record("encoder", elf("encoder", "--settings", json.dumps(encoder), "--tokenizer", str(models["tokenizer"]),
                          "--tokens", str(tokens), "--out", str(d / "encoder"), "--device", "cpu",
                          "--no-progress"), ENCODER_STEPS)
    n = base_samples * scale
    sampler = json.dumps(dict(method="sde", steps=2, gamma=1.0, sc_cfg=2.0))
    samples = d / "samples"
    sample = elf("sample", "--checkpoint", str(models["run"]), "--sampler", sampler, "--sampler-name", "sde2",
                 "--run-name", "run", "--seed", *map(str, SEEDS), "--n", str(n), "--batch-size", "32",
                 "--tokenizer", str(models["tokenizer"]), "--device", "cpu", "--out-dir", str(samples),
                 "--no-progress")
    if set(stages) & {"sample", "score", "aggregate"}:
        record("sample", sample, len(SEEDS) * n * L)
        if "sample" not in stages:
            measure(sample)
    files = [str(samples / f"seed{s}.jsonl") for s in SEEDS]
    scores = d / "scores"
    score = elf("score", "--samples", *files, "--task", "unconditional", "--scorer", str(scorer),
                "--device", "cpu", "--out-dir", str(scores))
    if set(stages) & {"score", "aggregate"}:
        record("score", score, len(SEEDS) * n)
        if "score" not in stages:
            measure(score)
    record("aggregate", elf("aggregate", "--scores", *[str(scores / f"seed{s}.json") for s in SEEDS],
                            "--run", "run", "--sampler", "sde2", "--out", str(d / "aggregate.json")),
           len(SEEDS) * n)
    return rows


def _prepared_tokens(tokens: Path) -> int:
    record = json.loads((tokens / "provenance.json").read_text())
    return sum(s["tokens_in"] for s in record["shards"].values())


def _train_rows(tokens: Path) -> int:
    return json.loads((tokens / "provenance.json").read_text())["sequences"]["train"]


def reader_probe(store: str) -> None:
    """``READER_STEPS`` batches as ``elf train`` reads a store too big to hold (per batch from Zarr)."""
    from elf.embed.reader import ShuffledBatches, StoreSource

    batches = ShuffledBatches(StoreSource(store, in_memory=False), READER_BATCH, seed=0,
                              normalization="scalar")
    for _ in range(READER_STEPS):
        next(batches)
    batches.close()


def span_corruption_seconds_per_paper_step() -> float:
    """CPU seconds of span-corrupting one paper batch (512 rows of 1024 tokens), in this process."""
    import torch

    from elf.embed.encoder import sentinel_ids, span_corruption

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 32000, (512, PAPER_L), generator=gen)
    start = time.perf_counter()
    span_corruption(ids, torch.ones_like(ids), gen, sentinel_ids=sentinel_ids(32100))
    return time.perf_counter() - start


# --------------------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------------------

def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def increment_exponent(scales: list[int], walls: list[float]) -> float | None:
    """k in wall = a + b * scale^k from three geometric sizes s, rs, r^2 s: the increments' ratio is
    r^k whatever the fixed cost a (start-up, imports). None when an increment is not positive (a cost
    that does not grow, within the noise)."""
    (s0, s1, s2), (w0, w1, w2) = scales, walls
    if len(scales) != 3 or s1 * s1 != s0 * s2 or w1 <= w0 or w2 <= w1:
        return None
    return math.log((w2 - w1) / (w1 - w0)) / math.log(s1 / s0)


def report(rows: list[dict], corruption_s: float) -> str:
    lines = ["| stage | size | peak anon MB | peak rss MB | wall s | units |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['stage']} | {r['scale']}x | {r['anon_mb']:.0f} | {r['rss_mb']:.0f} | "
                     f"{r['wall_s']:.1f} | {r['units']:,.0f} |")
    lines += ["", "| stage | peak anon largest / smallest | anon exponent | time exponent | paper size | "
              "CPU-hours here (1 core, at most) | node-hours (job cores) | runs on |",
              "|---|---:|---:|---:|---|---:|---:|---|"]
    for stage in STAGES:
        mine = sorted((r for r in rows if r["stage"] == stage), key=lambda r: r["scale"])
        if len(mine) < 2:
            continue
        scales = [r["scale"] for r in mine]
        mem_exp = slope(scales, [r["anon_mb"] for r in mine])
        time_exp = increment_exponent(scales, [r["wall_s"] for r in mine])
        units, what, cores, where = PAPER[stage]
        fixed = mine[0]["units"] == mine[-1]["units"]  # a fixed step count: the cost of one run
        # the largest size's units per wall second: start-up included, so an upper bound on the time
        rate = mine[-1]["units"] / mine[-1]["wall_s"]
        cpu_h = (units * corruption_s if stage == "encoder" else units / rate) / 3600
        node_h = f"{cpu_h / cores:,.2f} ({cores} cores)" if where == "cpu" else "GPU job"
        texp = "fixed steps" if fixed else ("no growth" if time_exp is None else f"{time_exp:+.2f}")
        lines.append(f"| {stage} | {mine[-1]['anon_mb'] / mine[0]['anon_mb']:.2f} | {mem_exp:+.2f} | {texp} | "
                     f"{units:,.3g} {what} | {cpu_h:,.1f} | {node_h} | "
                     f"{where}{' (data path only)' if where == 'gpu' else ''} |")
    lines += ["", f"span corruption of one paper batch (512 x 1024 tokens) on one core: {corruption_s:.2f} s"]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-docs", type=int, default=2000,
                   help="documents of the 1x corpus (~150 words each; twice prepare's batch of 1000 "
                   "documents, so that 1x already holds full batches of the train split)")
    p.add_argument("--base-samples", type=int, default=64,
                   help="samples per seed at 1x (at least the score batch, 64: memory then grows no more)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--from-json", help="print the tables of rows written by --json")
    p.add_argument("--reader-probe", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.reader_probe:
        reader_probe(args.reader_probe)
        return
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        print(report(saved["rows"], saved["corruption_s"]))
        return
    stages = tuple(args.stages)
    with tempfile.TemporaryDirectory(prefix="elf-scaling-") as tmp:
        work = Path(tmp)
        texts = write_corpus(work / "base.jsonl", 2000)
        models = build_models(work, texts)
        scorer = None
        if set(stages) & {"score", "aggregate"}:
            measure(elf("prepare", "--settings", json.dumps(dict(task="unconditional", source="local",
                                                                name=str(work / "base.jsonl"), max_length=L)),
                        "--tokenizer", str(models["tokenizer"]), "--carve-docs", "50", "--out",
                        str(work / "scorer_corpus")))
            scorer = work / "scorer"
            measure(elf("scorer", "--settings", json.dumps(dict(vocab_size=300, layers=1, width=32, heads=2,
                                                                steps=2, batch_size=4, context=64)),
                        "--corpus", str(work / "scorer_corpus"), "--out", str(scorer), "--device", "cpu"))
        rows = []
        for scale in args.sizes:
            print(f"size {scale}x", flush=True)
            rows += run_size(stages, work, models, scale, args.base_docs, args.base_samples, scorer)
    corruption_s = span_corruption_seconds_per_paper_step()
    if args.json:
        Path(args.json).write_text(json.dumps(dict(rows=rows, corruption_s=corruption_s), indent=1))
    print()
    print(report(rows, corruption_s))


if __name__ == "__main__":
    main()
