r"""``elf score``: score samples files (or real held-out text) and write their metrics JSON (spec §6).

Reads a samples file (elf/evaluate/samples.py format) and, for unconditional samples, a scorer folder or
hub name (``elf scorer`` output, or ``gpt2-large``). Writes ``--out`` (atomically):
``{"provenance": {...}, "samples_provenance": <samples header>, "metrics": {...}, "per_sample": [...]}``
(``per_sample``: each sample's own ``i`` and values — Gen. PPL and entropy, sentence BLEU, or ROUGE —
that the qualitative figure F8 shows beside an example), with
- unconditional: gen_ppl, entropy, n_samples, n_empty, n_scored_tokens (Gen. PPL under the scorer as
  the released scorer computes it, elf/evaluate/genppl.py: samples empty after strip() dropped, the
  rest padded together, scored 64 a batch; entropy of the scorer's token ids; both over whole
  samples by default, a sample longer than the scorer's context scored in context-sized chunks as the
  authors' ``Metrics`` does (``--max-length N`` truncates at N tokens instead: N = the context is the
  released scorer's truncation); ``--precision bf16``: the scorer's weights in bf16);
- translation: bleu, bleu_signature (sacreBLEU, lowercase, effective order);
- summarization: rouge1/2/L, their per-example SEs rouge1_se/..., n_examples.
Each metric's standard error over this file's own samples comes with it (elf/evaluate/uncertainty.py):
gen_ppl_se (delta method on the per-sample NLL, through exp), entropy_se (SD / sqrt(N)), bleu_se
(bootstrap over sentences, seed and resamples recorded in ``metrics_settings``), rouge*_se; so a
single evaluation seed carries an uncertainty that the replication review judges with.
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

from pathlib import Path

from elf.artifacts.names import (METRICS, PER_SAMPLE, PROVENANCE, REFERENCE_KIND, REFERENCE_TOKENIZER,
                                 SAMPLES_HEADER, SAMPLES_SHA256, SCORED_SAMPLES, SCORER, TEXTS_SHA256)
from elf.errors import ElfError
from elf.stages.args import resolve_device
from elf.config import PRECISIONS
from elf.io import atomic_dir, provenance, recorded_path, write_json
from elf.artifacts import file_sha256

# Heavy imports (torch, transformers, sacrebleu) happen inside the functions that need them:
# `elf --help` imports every stage module.
TASKS = ("unconditional", "translation", "summarization")
GPT2_CONTEXT = 1024  # = elf.evaluate.genppl.GPT2_CONTEXT, the released scorer's truncation
MAX_LENGTH = None    # the default: whole samples, long ones in context-sized chunks (authors' Metrics)
SCORED_FIELDS = ("i", "text", "reference")  # what scoring reads of a sample (not its token ids)


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
    parser.add_argument("--max-length", type=int, default=0,
                        help="truncation of retokenised samples; 0 (default): none, a sample longer "
                        "than the scorer's context is scored in context-sized chunks (the authors' "
                        "Metrics); 1024: the released scorer's truncation")
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
# Entry point
# --------------------------------------------------------------------------------------------------

def run(args) -> None:
    if args.batch_size < 1 or args.max_length == 1 or args.max_length < 0 or args.n < 1:
        raise ElfError("--batch-size and --n must be >= 1, --max-length 0 (none) or >= 2")
    options = dict(scorer_ref=args.scorer, device=args.device, precision=args.precision,
                   batch_size=args.batch_size, max_length=args.max_length or MAX_LENGTH)
    if args.reference_texts:
        if not args.out:
            raise ElfError("--reference-texts writes one score: pass --out")
        if args.task != "unconditional":
            raise ElfError("--reference-texts scores Gen. PPL and entropy: use --task unconditional")
        score_reference(args.reference_texts, split=args.split, n=args.n, tokenizer_ref=args.tokenizer,
                        out=Path(args.out), **options)
        return
    if args.out and len(args.samples) != 1:
        raise ElfError(f"--out holds one score; for {len(args.samples)} samples files pass --out-dir")
    stems = [Path(path).stem for path in args.samples]
    if len(set(stems)) != len(stems):
        raise ElfError(f"--samples: two files share a name, their scores would collide: {args.samples}")
    records = score_samples(args.samples, task=args.task, run=args.run, sampler=args.sampler,
                            staged=args.staged, **options)
    if args.out:
        write_json(args.out, records[stems[0]])
        return
    with atomic_dir(args.out_dir) as tmp:
        for stem, record in records.items():
            write_json(tmp / f"{stem}.json", record)


_SCORERS: dict[tuple, tuple] = {}  # one load per process: `elf evaluate` scores many samplers


def load_unconditional_scorer(scorer_ref: str | None, device: str, precision: str, batch_size: int,
                              max_length: int | None):
    """The ``Scorer`` of ``--scorer``, its weights loaded once for every file scored."""
    from elf.evaluate.metrics import Scorer
    from elf.evaluate.scorer import load_scorer
    from elf.precision import scorer_dtype

    if not scorer_ref:
        raise ElfError("--scorer is required for unconditional scoring")
    device = resolve_device(device)
    key = (scorer_ref, str(device), precision)
    if key not in _SCORERS:
        try:
            _SCORERS[key] = load_scorer(scorer_ref, device, scorer_dtype(precision))
        except OSError as err:
            raise ElfError(f"--scorer {scorer_ref}: cannot load ({err})") from err
    return Scorer(*_SCORERS[key], device, batch_size, max_length)


def scorer_fields(scorer_ref: str, scorer) -> dict:
    """How a score file's provenance names its scorer (``elf.artifacts.records.scorer_fingerprint``)."""
    from elf.artifacts.records import scorer_fingerprint

    return {SCORER: str(scorer_ref), **scorer_fingerprint(scorer_ref, scorer.model)}


def score_samples(paths: list[str], *, task: str, run: str | None, sampler: str | None,
                  staged: str | None = None, **options) -> dict[str, dict]:
    """The score record of each samples file, by file stem (every file checked before any is scored);
    a file is named by its path (under ``staged`` = ``"STAGING=FINAL"``: where it will lie)."""
    loaded = [read_samples_file(path, task, run, sampler) for path in paths]
    scorer = load_unconditional_scorer(**options) if task == "unconditional" else None
    return {Path(path).stem: score_record(path, header, rows, task, scorer, options["scorer_ref"],
                                          recorded_path(path, staged))
            for path, (header, rows) in zip(paths, loaded)}


def read_samples_file(path: str, task: str, run: str | None, sampler: str | None
                      ) -> tuple[dict, list[dict]]:
    """A samples file, checked against what it claims (``elf.artifacts.check_samples_header``: its
    seed, task, run, sampler and checkpoint)."""
    from elf.artifacts import check_samples_header
    from elf.artifacts.records import SamplesFormatError, read_samples

    try:
        header, rows = read_samples(path, fields=SCORED_FIELDS)
    except (SamplesFormatError, FileNotFoundError) as err:
        raise ElfError(f"--samples: {err}") from err
    if not rows:
        raise ElfError(f"--samples {path}: the file holds no samples")
    check_samples_header(path, header, task=task, run=run, sampler=sampler)
    return header, rows


def score_record(path: str, samples_header: dict, rows: list[dict], task: str, scorer,
                 scorer_ref: str | None, recorded_as: str | None = None) -> dict:
    """The score file of one samples file: provenance, the samples' header, the metrics, and each
    sample's own values (``per_sample``: what the qualitative figure F8 shows beside a sample)."""
    from elf.evaluate.metrics import conditional_metrics, finite_or_none, unconditional_metrics

    named: dict = {}
    if task == "unconditional":
        metrics, settings, per_sample = unconditional_metrics([row["text"] for row in rows], scorer)
        named = scorer_fields(scorer_ref, scorer)
    else:
        missing = [row.get("i", n) for n, row in enumerate(rows) if not isinstance(row.get("reference"), str)]
        if missing:
            raise ElfError(f"{task} scoring needs a 'reference' on every sample; missing on i={missing[:5]}")
        metrics, settings, per_sample = conditional_metrics([row["text"] for row in rows],
                                                            [row["reference"] for row in rows], task)
    record = provenance(**{SCORED_SAMPLES: recorded_as or str(path), SAMPLES_SHA256: file_sha256(path)},
                        task=task, metrics_settings=settings, **named)
    return {PROVENANCE: record, SAMPLES_HEADER: samples_header, METRICS: finite_or_none(metrics),
            PER_SAMPLE: [{"i": row.get("i", k), **finite_or_none(values)}
                         for k, (row, values) in enumerate(zip(rows, per_sample))]}


def score_reference(source: str, *, split: str, n: int, tokenizer_ref: str | None, out: Path,
                    **options) -> None:
    """Score real held-out text (the figures' "Dataset" line) in the same output format; with a
    tokenizer, its rows post-processed as samples are, and the calibration lines."""
    from elf.artifacts.records import SamplesFormatError, texts_sha256
    from elf.evaluate.metrics import calibration_metrics, finite_or_none, unconditional_metrics
    from elf.evaluate.samples import reference_texts

    tokenizer = load_tokenizer_or_fail(tokenizer_ref) if tokenizer_ref else None
    try:
        texts, split, rows = reference_texts(source, split, n, tokenizer)
    except (SamplesFormatError, FileNotFoundError) as err:
        raise ElfError(f"--reference-texts: {err}") from err
    if not texts:
        raise ElfError(f"--reference-texts {source}: no rows to score")
    scorer = load_unconditional_scorer(**options)
    metrics, settings, _ = unconditional_metrics(texts, scorer)
    data = {"kind": REFERENCE_KIND, "dataset": str(source), "split": split, "n": len(texts),
            TEXTS_SHA256: texts_sha256(texts), REFERENCE_TOKENIZER: tokenizer_ref,
            "rows": "token ids cut at the first EOS, as samples" if rows else "text column"}
    record = provenance(**{REFERENCE_KIND: data}, task="unconditional", metrics_settings=settings,
                        **scorer_fields(options["scorer_ref"], scorer))
    result = {PROVENANCE: record, SAMPLES_HEADER: data, METRICS: finite_or_none(metrics)}
    if rows is not None:
        result["calibration"] = calibration_metrics(rows, tokenizer, scorer)
    write_json(out, result)


def load_tokenizer_or_fail(name: str):
    from elf.data.tokenizer import load_tokenizer

    try:
        return load_tokenizer(name)
    except (OSError, ValueError) as err:
        raise ElfError(f"--tokenizer {name}: cannot load ({err})") from err
