"""The metrics of one set of texts, per task (spec §6): Gen. PPL and entropy under a scorer
(unconditional, with repetition), corpus BLEU with sentence BLEU per example (translation), ROUGE (summarization),
and the calibration lines of real rows (their tokens shuffled, unigram draws). Each returns the
metrics, the settings that produced them and the values per sample. No I/O: ``elf score`` reads
the samples and writes the score file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


SE_SETTINGS = {  # how each task's standard errors are computed (elf/evaluate/uncertainty.py)
    "unconditional": "gen_ppl_se: delta method on log Gen. PPL over samples, through exp; "
                     "entropy_se: sample SD / sqrt(N)",
    "translation": "bleu_se: SD of corpus BLEU over bootstrap resamples of the sentences",
    "summarization": "rouge*_se: population SD over examples / sqrt(N) (the authors')",
}


@dataclass(frozen=True)
class Scorer:
    """A loaded Gen. PPL scorer and how it scores: batch size and the truncation of each retokenised
    text (``max_length``; None: whole texts, scored in context-sized chunks)."""
    model: Any
    tokenizer: Any
    device: Any
    batch_size: int
    max_length: int | None


def unconditional_metrics(texts: list[str], scorer: Scorer) -> tuple[dict, dict, list[dict]]:
    """(metrics, metrics_settings, per-sample values) for Gen. PPL, entropy and repetition (the
    share of a sample's words its most frequent word takes), with the standard errors of Gen. PPL
    and entropy over the samples (``gen_ppl_se``, ``entropy_se``: elf/evaluate/uncertainty.py)."""
    from elf.evaluate.entropy import text_entropy
    from elf.evaluate.genppl import gen_ppl, model_context
    from elf.evaluate.repetition import repetition, top_word_share
    from elf.evaluate.uncertainty import mean_se, ratio_ppl_se

    context = model_context(scorer.model)
    ppl = gen_ppl(texts, scorer.model, scorer.tokenizer, batch_size=scorer.batch_size,
                  device=scorer.device, max_length=scorer.max_length)
    entropy = text_entropy(texts, scorer.tokenizer, max_length=scorer.max_length)  # the ids it saw
    metrics = {"gen_ppl": ppl["gen_ppl"], "entropy": entropy["entropy"],
               "gen_ppl_se": ratio_ppl_se([v for v in ppl["per_sample_nll"] if v is not None],
                                          [v for v in ppl["per_sample_tokens"] if v is not None]),
               "entropy_se": mean_se(entropy["per_sample"]),
               "repetition": repetition(texts)["repetition"], "n_samples": len(texts),
               "n_empty": ppl["n_empty"], "n_scored_tokens": ppl["n_scored_tokens"]}
    settings = {"batch_size": scorer.batch_size, "context": context,
                "truncation": scorer.max_length,
                "long_samples": "scored in chunks of the context, each on its own (the authors' Metrics)",
                "padding": "right, EOS, to the longest sample of the whole set",
                "counted": "non-EOS targets from position 1 plus each row's first EOS",
                "dropped": "samples empty after strip() (Gen. PPL and entropy)",
                "scorer_dtype": str(next(scorer.model.parameters()).dtype).removeprefix("torch."),
                "device": str(scorer.device),
                "entropy_tokens": "scorer tokenizer, the ids scored (truncation above), nats",
                "repetition": "most frequent word's share of a sample's words, mean over samples",
                "se": SE_SETTINGS["unconditional"]}
    per_sample = [{"gen_ppl": p, "entropy": h, "repetition": top_word_share(text)}
                  for p, h, text in zip(ppl["per_sample"], entropy["per_sample"], texts)]
    return metrics, settings, per_sample


def conditional_metrics(hypotheses: list[str], references: list[str], task: str
                        ) -> tuple[dict, dict, list[dict]]:
    """(metrics, metrics_settings, per-example values) for translation (corpus BLEU; sentence BLEU
    per example) or summarization (ROUGE)."""
    from elf.evaluate.textmetrics import (BLEU_SETTINGS, ROUGE_SETTINGS, bleu, rouge,
                                          rouge_per_example, sentence_bleus)

    from elf.evaluate.uncertainty import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, bleu_bootstrap_se
    from elf.evaluate.source_blind import source_blind_metrics

    # the source-blind calibration beside each score (elf/evaluate/source_blind.py)
    blind = source_blind_metrics(task, hypotheses, references)
    if task == "translation":
        score, signature = bleu(hypotheses, references)
        per_example = [{"bleu": b} for b in sentence_bleus(hypotheses, references)]
        se = bleu_bootstrap_se(hypotheses, references, BOOTSTRAP_SEED, BOOTSTRAP_RESAMPLES)
        return ({"bleu": score, "bleu_se": se, "bleu_signature": signature,
                 "n_examples": len(hypotheses), **blind},
                {**BLEU_SETTINGS, "se": SE_SETTINGS["translation"],
                 "bootstrap_seed": BOOTSTRAP_SEED, "bootstrap_resamples": BOOTSTRAP_RESAMPLES},
                per_example)
    return ({**rouge(hypotheses, references), **blind}, ROUGE_SETTINGS,
            rouge_per_example(hypotheses, references))


def calibration_metrics(rows: list[list[int]], tokenizer, scorer: Scorer) -> dict:
    """Gen. PPL and entropy of token ``rows`` with their tokens shuffled, and of unigram draws
    (seed 0): text with the corpus's words but no order."""
    from elf.evaluate.calibration import CORRUPTIONS, corrupt_rows

    def texts(how):
        return [tokenizer.decode(r, skip_special_tokens=True) for r in corrupt_rows(rows, how, seed=0)]
    return {how: finite_or_none(unconditional_metrics(texts(how), scorer)[0]) for how in CORRUPTIONS}


def finite_or_none(metrics: dict) -> dict:
    """JSON has no NaN: a metric with nothing to average becomes null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
