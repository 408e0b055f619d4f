"""Conditional-task metrics (spec §6): sacreBLEU for translation, rouge-score ROUGE for summarization.

- BLEU: sacreBLEU corpus BLEU, lowercased, effective order (the signature records both: ``case:lc``,
  ``eff:yes``), default 13a tokenisation, one reference per hypothesis.
- ROUGE-1/2/L: Google's ``rouge_score`` with the Porter stemmer; mean F1 × 100 over examples and its
  standard error over examples with the population deviation, as the authors compute it
  (std with ddof = 0, / sqrt(n); 0 for one example).

    from elf.evaluate.textmetrics import bleu, rouge
    score, signature = bleu(hypotheses, references)
    rouge(hypotheses, references)   # {"rouge1", "rouge1_se", ..., "rougeL_se", "n_examples"}
"""

from __future__ import annotations

import math
from typing import Sequence

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
BLEU_SETTINGS = {"lowercase": True, "effective_order": True}
ROUGE_SE_DDOF = 0  # the authors' ROUGE standard error uses the population deviation
ROUGE_SETTINGS = {"rouge_types": list(ROUGE_TYPES), "use_stemmer": True, "statistic": "fmeasure",
                  "se_ddof": ROUGE_SE_DDOF}


def _check_pairs(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no examples to score")


def bleu(hyps: Sequence[str], refs: Sequence[str]) -> tuple[float, str]:
    """Corpus BLEU (0–100) of ``hyps`` against one reference each, and the sacreBLEU signature."""
    from sacrebleu.metrics import BLEU  # imported on use: `elf aggregate` needs only mean_and_se

    _check_pairs(hyps, refs)
    metric = BLEU(**BLEU_SETTINGS)
    result = metric.corpus_score(list(hyps), [list(refs)])
    return float(result.score), str(metric.get_signature())


def sentence_bleus(hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
    """Sentence BLEU (0–100) of each hypothesis against its reference, with ``BLEU_SETTINGS`` (the
    effective order keeps short sentences from scoring 0). For showing examples; not averaged."""
    from sacrebleu.metrics import BLEU

    _check_pairs(hyps, refs)
    metric = BLEU(**BLEU_SETTINGS)
    return [float(metric.sentence_score(hyp, [ref]).score) for hyp, ref in zip(hyps, refs)]


def mean_and_se(values: Sequence[float], ddof: int = 1) -> tuple[float, float]:
    """Mean and standard error (std with ``ddof``: 1 sample, 0 population; / sqrt(n)); SE 0 for a
    single value."""
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    variance = sum((v - mean) ** 2 for v in values) / (n - ddof)
    return mean, math.sqrt(variance / n)


def rouge_per_example(hyps: Sequence[str], refs: Sequence[str]) -> list[dict[str, float]]:
    """ROUGE-1/2/L F1 × 100 of each example (``ROUGE_SETTINGS``)."""
    from rouge_score import rouge_scorer

    _check_pairs(hyps, refs)
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    scores = [scorer.score(ref, hyp) for hyp, ref in zip(hyps, refs)]  # score(target, prediction)
    return [{t: 100.0 * score[t].fmeasure for t in ROUGE_TYPES} for score in scores]


def rouge(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """Mean ROUGE-1/2/L F1 × 100 over examples, with ``<type>_se`` and ``n_examples``."""
    per_example = rouge_per_example(hyps, refs)
    result: dict = {}
    for rouge_type in ROUGE_TYPES:
        mean, se = mean_and_se([s[rouge_type] for s in per_example], ddof=ROUGE_SE_DDOF)
        result[rouge_type], result[f"{rouge_type}_se"] = mean, se
    result["n_examples"] = len(per_example)
    return result
