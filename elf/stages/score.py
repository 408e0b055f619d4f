"""``elf score``: score samples files (or real held-out text) and write their metrics JSON (spec §6).

Reads a samples file (elf/evaluate/samples.py format) and, for unconditional samples, a scorer folder or
hub name (``elf scorer`` output, or ``gpt2-large``). Writes ``--out`` (atomically):
``{"provenance": {...}, "samples_provenance": <samples header>, "metrics": {...}, "per_sample": [...]}``
(``per_sample``: each sample's own ``i`` and values — Gen. PPL and entropy, sentence BLEU, or ROUGE —
that the qualitative figure F8 shows beside an example), with
- unconditional: gen_ppl, entropy, n_samples, n_empty, n_scored_tokens (Gen. PPL under the scorer as
  the released scorer computes it, elf/evaluate/genppl.py: samples empty after strip() dropped, the
  rest padded together, scored 64 a batch; entropy of the scorer's token ids, both truncated at
  ``--max-length`` or the scorer's context; ``--precision bf16``: the scorer's weights in bf16);
- translation: bleu, bleu_signature (sacreBLEU, lowercase, effective order);
- summarization: rouge1/2/L, their per-example SEs rouge1_se/..., n_examples.
Non-finite values (nothing scored) are written as null. Every samples file is checked before any is
scored (``elf.artifacts.check_samples_header``): the seed its name ``seed<k>`` says, ``--task``, and
``--run`` / ``--sampler`` when given, its row count, and the checkpoint digest its header records
against the checkpoint now at that path.

Several samples files (the seeds of one run and sampler) share one process and one scorer load:
``--samples DIR/seed0.jsonl DIR/seed1.jsonl --out-dir SCORES`` writes ``SCORES/seed0.json``, ...
(one file per samples file, named after it; the folder appears whole or not at all).

``--reference-texts`` scores real text instead — the figures' "Dataset" line: a ``datasets`` folder
(column ``text``, split ``--split``, default test; first ``--n`` rows) or a JSONL file of ``text`` rows.
With ``--tokenizer`` (a packed dataset's, as the DAG runs it) the rows' ``input_ids`` are cut at their
first EOS and decoded exactly as samples are, so the line compares like with like (unigram entropy
grows with length, and a sample ends at its first EOS), and the output's ``calibration`` holds the
same metrics for those rows with their tokens shuffled and for i.i.d. unigram tokens: text with the
corpus's words but no order. Documents are cut at the same ``--max-length`` as samples.

    elf score --samples results/samples/owt-b/ode64/seed0.jsonl --task unconditional \
        --scorer results/scorer --out results/scores/owt-b/ode64/seed0.json
    elf score --reference-texts results/data/owt/tokens --n 1000 --scorer results/scorer \
        --tokenizer results/models/tokenizer --out results/scores/_dataset/owt.json
"""

from __future__ import annotations

import math
from pathlib import Path

from elf.cli import ElfError, resolve_device
from elf.config import PRECISIONS
from elf.evaluate.samples import SamplesFormatError, read_samples, reference_texts, texts_sha256
from elf.io import atomic_dir, provenance, recorded_path, sha256_file, sha256_json, write_json

# Heavy imports (torch, transformers, sacrebleu) happen inside the functions that need them:
# `elf --help` imports every stage module.
TASKS = ("unconditional", "translation", "summarization")
GPT2_CONTEXT = 1024  # = elf.evaluate.genppl.GPT2_CONTEXT, the released scorer's truncation


def register(subparsers) -> None:
    parser = subparsers.add_parser("score", help="Gen. PPL/entropy, BLEU or ROUGE of a samples file",
                                   description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--samples", nargs="+", help="samples JSONL file(s) (written by `elf sample`)")
    source.add_argument("--reference-texts", help="real text to score: datasets folder or JSONL file")
    parser.add_argument("--task", choices=TASKS, default="unconditional", help="which metrics")
    parser.add_argument("--run", help="the run the samples must be of (checked against each header)")
    parser.add_argument("--sampler", help="the sampler setting they must be of (checked likewise)")
    parser.add_argument("--scorer", help="scorer folder or hub name (unconditional)")
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="score JSON to write (one samples file, or --reference-texts)")
    out.add_argument("--out-dir", help="folder of <samples stem>.json, one per --samples file")
    parser.add_argument("--batch-size", type=int, default=64, help="scorer batch (released: 64)")
    parser.add_argument("--max-length", type=int, default=GPT2_CONTEXT,
                        help="truncation of retokenised samples (released: 1024)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="precision policy (elf/precision.py): bf16 loads the scorer's weights in "
                        "bf16, as the released scorer does")
    parser.add_argument("--staged", metavar="STAGING=FINAL", help="the samples sit in a folder STAGING "
                        "that moves to FINAL when complete: record their paths under FINAL")
    parser.add_argument("--n", type=int, default=1000, help="--reference-texts: rows scored")
    parser.add_argument("--split", default="test", help="--reference-texts: dataset split")
    parser.add_argument("--tokenizer", help="--reference-texts of a packed dataset: its tokenizer. "
                        "The rows' token ids are then cut at the first EOS and decoded exactly as "
                        "samples are, and the calibration lines are scored too: the same rows with "
                        "their tokens shuffled, and i.i.d. unigram tokens (elf/evaluate/calibration.py)")
    parser.set_defaults(func=run)


# --------------------------------------------------------------------------------------------------
# Metrics per task
# --------------------------------------------------------------------------------------------------

def scorer_fingerprint(name_or_path: str, model) -> dict:
    """sha256 of a local scorer's weight/tokenizer files, or a config hash for a hub name."""
    folder = Path(name_or_path)
    if folder.is_dir():
        files = sorted(f for f in folder.iterdir() if f.is_file() and f.name != "provenance.json")
        return {"scorer_sha256": sha256_json({f.name: sha256_file(f) for f in files})}
    return {"scorer_config_sha256": sha256_json(model.config.to_dict()),
            "scorer_revision": getattr(model.config, "_commit_hash", None)}


_SCORERS: dict[tuple, tuple] = {}  # one load per process: `elf evaluate` scores many samplers


def load_unconditional_scorer(args) -> tuple:
    """(model, tokenizer, device) of ``--scorer``, loaded once for every file scored."""
    from elf.evaluate.scorer import load_scorer
    from elf.precision import scorer_dtype

    if not args.scorer:
        raise ElfError("--scorer is required for unconditional scoring")
    device = resolve_device(args.device)
    key = (args.scorer, str(device), args.precision)
    if key not in _SCORERS:
        try:
            _SCORERS[key] = load_scorer(args.scorer, device, scorer_dtype(args.precision))
        except OSError as err:
            raise ElfError(f"--scorer {args.scorer}: cannot load ({err})") from err
    return (*_SCORERS[key], device)


def unconditional_metrics(texts: list[str], args, scorer) -> tuple[dict, dict, dict, list[dict]]:
    """(metrics, metrics_settings, scorer provenance fields, per-sample values) for Gen. PPL,
    entropy and repetition (the share of a sample's words its most frequent word takes)."""
    from elf.evaluate.entropy import text_entropy
    from elf.evaluate.genppl import gen_ppl, scoring_context
    from elf.evaluate.repetition import repetition, top_word_share

    model, tokenizer, device = scorer
    context = scoring_context(model, args.max_length)
    ppl = gen_ppl(texts, model, tokenizer, batch_size=args.batch_size, device=device,
                  max_length=context)
    entropy = text_entropy(texts, tokenizer, max_length=context)  # the ids the scorer saw
    metrics = {"gen_ppl": ppl["gen_ppl"], "entropy": entropy["entropy"],
               "repetition": repetition(texts)["repetition"], "n_samples": len(texts),
               "n_empty": ppl["n_empty"], "n_scored_tokens": ppl["n_scored_tokens"]}
    settings = {"batch_size": args.batch_size, "context": context,
                "padding": "right, EOS, to the longest sample of the whole set",
                "counted": "non-EOS targets from position 1 plus each row's first EOS",
                "dropped": "samples empty after strip() (Gen. PPL and entropy)",
                "scorer_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
                "device": str(device), "entropy_tokens": "scorer tokenizer, truncated at context, nats",
                "repetition": "most frequent word's share of a sample's words, mean over samples"}
    per_sample = [{"gen_ppl": p, "entropy": h, "repetition": top_word_share(text)}
                  for p, h, text in zip(ppl["per_sample"], entropy["per_sample"], texts)]
    return (metrics, settings, {"scorer": str(args.scorer), **scorer_fingerprint(args.scorer, model)},
            per_sample)


def conditional_metrics(rows: list[dict], task: str) -> tuple[dict, dict, list[dict]]:
    """(metrics, metrics_settings, per-example values) for translation (corpus BLEU; sentence BLEU
    per example) or summarization (ROUGE)."""
    from elf.evaluate.textmetrics import (BLEU_SETTINGS, ROUGE_SETTINGS, bleu, rouge,
                                          rouge_per_example, sentence_bleus)

    missing = [row.get("i", n) for n, row in enumerate(rows) if not isinstance(row.get("reference"), str)]
    if missing:
        raise ElfError(f"{task} scoring needs a 'reference' on every sample; missing on i={missing[:5]}")
    hyps, refs = [row["text"] for row in rows], [row["reference"] for row in rows]
    if task == "translation":
        score, signature = bleu(hyps, refs)
        per_example = [{"bleu": b} for b in sentence_bleus(hyps, refs)]
        return ({"bleu": score, "bleu_signature": signature, "n_examples": len(rows)}, BLEU_SETTINGS,
                per_example)
    return rouge(hyps, refs), ROUGE_SETTINGS, rouge_per_example(hyps, refs)


def finite_or_none(metrics: dict) -> dict:
    """JSON has no NaN: a metric with nothing to average becomes null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------

def run(args) -> None:
    if args.batch_size < 1 or args.max_length < 2 or args.n < 1:
        raise ElfError("--batch-size and --n must be >= 1, --max-length >= 2")
    if args.reference_texts:
        if not args.out:
            raise ElfError("--reference-texts writes one score: pass --out")
        run_reference(args)
        return
    if args.out and len(args.samples) != 1:
        raise ElfError(f"--out holds one score; for {len(args.samples)} samples files pass --out-dir")
    stems = [Path(path).stem for path in args.samples]
    if len(set(stems)) != len(stems):
        raise ElfError(f"--samples: two files share a name, their scores would collide: {args.samples}")
    loaded = [read_samples_file(path, args) for path in args.samples]  # all checked before scoring
    scorer = load_unconditional_scorer(args) if args.task == "unconditional" else None
    records = {Path(path).stem: score_record(path, header, rows, args, scorer)
               for path, (header, rows) in zip(args.samples, loaded)}
    if args.out:
        write_json(args.out, records[stems[0]])
        return
    with atomic_dir(args.out_dir) as tmp:
        for stem, record in records.items():
            write_json(tmp / f"{stem}.json", record)


def read_samples_file(path: str, args) -> tuple[dict, list[dict]]:
    """A samples file, checked against what it claims (``elf.artifacts.check_samples_header``: its
    seed, task, run, sampler and checkpoint)."""
    from elf.artifacts import check_samples_header

    try:
        header, rows = read_samples(path)
    except (SamplesFormatError, FileNotFoundError) as err:
        raise ElfError(f"--samples: {err}") from err
    if not rows:
        raise ElfError(f"--samples {path}: the file holds no samples")
    check_samples_header(path, header, task=args.task, run=args.run, sampler=args.sampler)
    return header, rows


def score_record(path: str, samples_header: dict, rows: list[dict], args, scorer) -> dict:
    """The score file of one samples file: provenance, the samples' header, the metrics, and each
    sample's own values (``per_sample``: what the qualitative figure F8 shows beside a sample)."""
    scorer_fields: dict = {}
    if args.task == "unconditional":
        metrics, settings, scorer_fields, per_sample = unconditional_metrics(
            [row["text"] for row in rows], args, scorer)
    else:
        metrics, settings, per_sample = conditional_metrics(rows, args.task)
    record = provenance(samples=recorded_path(path, args.staged), samples_sha256=sha256_file(path),
                        task=args.task, metrics_settings=settings, **scorer_fields)
    return {"provenance": record, "samples_provenance": samples_header,
            "metrics": finite_or_none(metrics),
            "per_sample": [{"i": row.get("i", k), **finite_or_none(values)}
                           for k, (row, values) in enumerate(zip(rows, per_sample))]}


def run_reference(args) -> None:
    """Score real held-out text (the figures' "Dataset" line) in the same output format; with
    ``--tokenizer``, its rows post-processed as samples are, and the calibration lines."""
    if args.task != "unconditional":
        raise ElfError("--reference-texts scores Gen. PPL and entropy: use --task unconditional")
    tokenizer = load_tokenizer_or_fail(args.tokenizer) if args.tokenizer else None
    try:
        texts, split, rows = reference_texts(args.reference_texts, args.split, args.n, tokenizer)
    except (SamplesFormatError, FileNotFoundError) as err:
        raise ElfError(f"--reference-texts: {err}") from err
    if not texts:
        raise ElfError(f"--reference-texts {args.reference_texts}: no rows to score")
    scorer = load_unconditional_scorer(args)
    metrics, settings, scorer_fields, _ = unconditional_metrics(texts, args, scorer)
    data = {"kind": "reference_texts", "dataset": str(args.reference_texts), "split": split,
            "n": len(texts), "texts_sha256": texts_sha256(texts),
            "rows": "token ids cut at the first EOS, as samples" if rows else "text column",
            "tokenizer": args.tokenizer}
    record = provenance(reference_texts=data, task=args.task, metrics_settings=settings, **scorer_fields)
    result = {"provenance": record, "samples_provenance": data, "metrics": finite_or_none(metrics)}
    if rows is not None:
        result["calibration"] = calibration_metrics(rows, tokenizer, args, scorer)
    write_json(args.out, result)


def load_tokenizer_or_fail(name: str):
    from elf.data.tokenizer import load_tokenizer

    try:
        return load_tokenizer(name)
    except (OSError, ValueError) as err:
        raise ElfError(f"--tokenizer {name}: cannot load ({err})") from err


def calibration_metrics(rows: list[list[int]], tokenizer, args, scorer) -> dict:
    """Gen. PPL and entropy of ``rows`` with their tokens shuffled, and of unigram draws (seed 0)."""
    from elf.evaluate.calibration import CORRUPTIONS, corrupt_rows

    def texts(how):
        return [tokenizer.decode(r, skip_special_tokens=True) for r in corrupt_rows(rows, how, seed=0)]
    return {how: finite_or_none(unconditional_metrics(texts(how), args, scorer)[0]) for how in CORRUPTIONS}
