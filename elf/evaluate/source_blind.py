"""The source-blind calibration of a conditional task's score (BLEU, ROUGE).

A conditional model that writes fluent target-language text but ignores its source still scores
above zero: n-grams common to every reference (function words, the fixed summary frame) match by
chance. Two lines show that level on the same examples:

- ``source_blind``: each output scored against *another* example's reference (the references
  rolled by one place: every example gets a different one, deterministically);
- ``reference_blind``: each reference scored against another example's reference — what a model
  that writes perfect target text unrelated to its source would get.

A score that reads its source sits well above both; one at their level reads nothing of it.

    source_blind_scores("translation", hypotheses, references)
    # {"metrics": {"bleu": {"score": 31.2, "source_blind": 3.9, "reference_blind": 4.4}}}
"""

from __future__ import annotations

from typing import Sequence

TASK_METRICS = {"translation": ("bleu",), "summarization": ("rouge1", "rouge2", "rougeL")}


def other_references(references: Sequence[str], shift: int = 1) -> list[str]:
    """Example i gets example (i + shift) mod n's reference (n ≥ 2, shift not a multiple of n)."""
    n = len(references)
    if n < 2 or shift % n == 0:
        raise ValueError(f"a source-blind score needs ≥ 2 examples and a shift that moves each "
                         f"(got {n} examples, shift {shift})")
    return [references[(i + shift) % n] for i in range(n)]


def task_score(task: str, hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """The task's metrics (``TASK_METRICS``) of ``hypotheses`` against ``references``."""
    from elf.evaluate.textmetrics import bleu, rouge

    if task == "translation":
        return {"bleu": bleu(hypotheses, references)[0]}
    if task == "summarization":
        scores = rouge(hypotheses, references)
        return {name: scores[name] for name in TASK_METRICS[task]}
    raise ValueError(f"unknown conditional task {task!r} (translation, summarization)")


def source_blind_scores(task: str, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Per metric: the score, its source-blind and its reference-blind calibration (module doc)."""
    others = other_references(references)
    scored = task_score(task, hypotheses, references)
    blind = task_score(task, hypotheses, others)
    ref_blind = task_score(task, references, others)
    return {"metrics": {name: {"score": scored[name], "source_blind": blind[name],
                               "reference_blind": ref_blind[name]} for name in scored}}


def source_blind_metrics(task: str, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """The calibration as flat metrics beside a score file's own (``<metric>_source_blind``,
    ``<metric>_reference_blind``): what ``elf.evaluate.metrics.conditional_metrics`` can merge so
    that aggregates, T1 and F17 carry it."""
    out = {}
    for name, values in source_blind_scores(task, hypotheses, references)["metrics"].items():
        out[f"{name}_source_blind"] = values["source_blind"]
        out[f"{name}_reference_blind"] = values["reference_blind"]
    return out
