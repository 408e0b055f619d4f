r"""``elf aggregate``: mean ± standard error across evaluation seeds of one (run, sampler) (spec §6).

Reads the score files of ``elf score`` (one per seed; the seed is taken from each file's samples header,
else the file name); writes ``--out`` (atomically):
``{"provenance": {..., "scores": [{"path", "sha256"}, ...]}, "run", "sampler",
"metrics": {name: {"mean", "se", "n", "per_seed": {"<seed>": value}}}}``; SE = sample std (ddof = 1) /
sqrt(n) across seeds; with one seed SE is 0.0 and ``se_note`` says so. A metric whose score files
carry its SE over samples (``gen_ppl_se``, ``entropy_se``, ``bleu_se``, ``rouge1_se`` ...) also gets
``se_samples``: the SE of the seed mean those imply, sqrt(Σ se_k²) / n (elf/evaluate/aggregate.py).
ROUGE metrics also carry the per-example SE (``se_examples``); BLEU's sacreBLEU signature is kept as
``bleu_signature``.

    elf aggregate --scores results/scores/owt-b/ode64/seed*.json --run owt-b --sampler ode64 \
        --out results/scores/owt-b/ode64/aggregate.json
"""

from __future__ import annotations

from pathlib import Path

from elf.artifacts import read_json
from elf.artifacts.checks import check_metric_range
from elf.artifacts.names import METRICS, PROVENANCE, SAMPLES_HEADER, SCORES
from elf.errors import ElfError
from elf.evaluate.aggregate import aggregate_metrics
from elf.io import provenance, recorded_path, write_json
from elf.artifacts import file_sha256


def register(subparsers) -> None:
    parser = subparsers.add_parser("aggregate", help="mean ± SE of score files across seeds",
                                   description=__doc__)
    parser.add_argument("--scores", nargs="+", required=True, help="score JSON files, one per seed")
    parser.add_argument("--run", required=True, help="run name (checked against the samples headers)")
    parser.add_argument("--sampler", required=True, help="sampler name (checked likewise)")
    parser.add_argument("--out", required=True, help="aggregate JSON to write")
    parser.add_argument("--staged", metavar="STAGING=FINAL", help="the score files sit in a folder "
                        "STAGING that moves to FINAL when complete: record their paths under FINAL")
    parser.set_defaults(func=run)


def run(args) -> None:
    write_json(args.out, aggregate_scores(args.scores, args.run, args.sampler, args.staged))


def seed_label(path: str, score: dict) -> str:
    """The evaluation seed of a score file: its samples header's ``seed``, else the file's stem."""
    seed = score.get(SAMPLES_HEADER, {}).get("seed")
    return str(seed) if seed is not None else Path(path).stem


def check_names(path: str, score: dict, run_name: str, sampler: str) -> None:
    """A score file whose samples name another run or sampler is a wiring mistake."""
    header = score.get(SAMPLES_HEADER, {})
    for key, expected in (("run", run_name), ("sampler", sampler)):
        if header.get(key) is not None and str(header[key]) != expected:
            raise ElfError(f"{path}: its samples are of {key} '{header[key]}', not '{expected}'")


def aggregate_scores(paths: list[str], run_name: str, sampler: str, staged: str | None = None) -> dict:
    """The aggregate record of one (run, sampler)'s score files, one per evaluation seed, each named
    by its path (under ``staged`` = ``"STAGING=FINAL"``: where it will lie, ``elf.io.recorded_path``)."""
    metrics_by_seed, sources, signatures = {}, [], set()
    for path in paths:
        score = read_json(path, "--scores file", finite=True)  # a NaN is damage, never a mean
        if not isinstance(score.get(METRICS), dict):
            raise ElfError(f"--scores {path}: no '{METRICS}' mapping (not an `elf score` output?)")
        check_names(path, score, run_name, sampler)
        check_metric_range(path, score[METRICS])
        seed = seed_label(path, score)
        if seed in metrics_by_seed:
            raise ElfError(f"--scores {path}: seed {seed} is given twice")
        metrics_by_seed[seed] = score[METRICS]
        sources.append({"path": recorded_path(path, staged), "sha256": file_sha256(path)})
        if "bleu_signature" in score[METRICS]:
            signatures.add(score[METRICS]["bleu_signature"])
    try:
        metrics = aggregate_metrics(metrics_by_seed)
    except ValueError as err:
        raise ElfError(f"--scores: {err}") from err
    result = {PROVENANCE: provenance(**{SCORES: sources}), "run": run_name, "sampler": sampler,
              METRICS: metrics}
    if signatures:
        if len(signatures) > 1:
            raise ElfError(f"--scores: BLEU computed with different settings: {sorted(signatures)}")
        result["bleu_signature"] = signatures.pop()
    return result
