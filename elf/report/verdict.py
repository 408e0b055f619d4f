"""The verdict on one of our numbers beside a paper value: consistent, inconsistent or not resolved.

One rule, printed once in the replication review (``VERDICT_RULE``):

- our SE (``elf.report.results.verdict_se``): the larger of the SE over evaluation seeds (two or more)
  and the SE of the seed mean from the samples' own spread (elf/evaluate/uncertainty.py), so it
  exists from one seed;
- the paper's SE: as printed (T9: over six seeds; T1 XSum: over examples). Where the paper prints
  none, its number is assumed to carry the same protocol noise as ours (``se_paper := se_ours``: the
  same evaluation, the same sample count). The authors' README values of their released checkpoints
  carry their stated tolerance instead (``README_TOLERANCE``: ≲ 1 Gen. PPL, ≲ 0.5 BLEU / ROUGE),
  added to the band, with se_paper 0;
- σ = sqrt(se_ours² + se_paper²), d = ours − paper.

**not resolved** when σ > ``NOISY_FRACTION`` × |paper| (the ±2σ band spans more than ±50 % of the
value: the comparison cannot tell a faithful run from a broken one), or when we have no SE and d ≠ 0;
otherwise **consistent** when |d| ≤ ``Z`` × σ + tolerance, **inconsistent** when not.
"""

from __future__ import annotations

import math

CONSISTENT, INCONSISTENT, UNRESOLVED = "consistent", "inconsistent", "not resolved"
VERDICTS = (CONSISTENT, INCONSISTENT, UNRESOLVED)
Z = 2.0                 # ≈ 95 % two-sided for a normal difference
NOISY_FRACTION = 0.25   # σ above a quarter of the value: the ±2σ band spans ±50 %
README_TOLERANCE = {"gen_ppl": 1.0, "bleu": 0.5, "rouge1": 0.5, "rouge2": 0.5, "rougeL": 0.5}
README_SOURCE = "README"
EQUAL = 1e-9            # relative: a number equal to every digit

VERDICT_RULE = (
    f"Verdict rule. d = ours − paper; σ = sqrt(se_ours² + se_paper²). se_ours is the larger of the SE "
    f"over our evaluation seeds (n ≥ 2) and the SE of the seed mean from the samples' own spread "
    f"(Gen. PPL: delta method on the per-sample NLL through exp; entropy: SD / sqrt(N); BLEU: "
    f"bootstrap over sentences, 1000 resamples, seed 0; ROUGE: over examples), so one seed has one. "
    f"se_paper is the paper's printed SE (T9: six seeds; T1 XSum: examples); where the paper prints "
    f"none we assume its number carries the same protocol noise as ours (se_paper := se_ours); the "
    f"authors' README values take their stated tolerance instead (≲ 1 Gen. PPL, ≲ 0.5 BLEU/ROUGE, "
    f"added to the band; se_paper 0). **consistent**: |d| ≤ {Z:g}σ (+ tolerance). "
    f"**inconsistent**: |d| > {Z:g}σ (+ tolerance). **not resolved**: σ > {NOISY_FRACTION:g} × "
    f"|paper| (too noisy: a ±{Z:g}σ band wider than ±{2 * NOISY_FRACTION:.0%} of the value cannot "
    f"discriminate), or we have no SE and d ≠ 0. The same three words, with 'holds / does not hold' "
    f"for a claim, and the same noise fraction are used by the trend checks below "
    f"(elf/report/verdict.py, elf/report/trends.py).")


def _finite(value: float) -> bool:
    return value is not None and math.isfinite(value)


def assumed_paper_se(src: str, metric: str, se_paper: float, se_ours: float) -> tuple[float, float, str]:
    """(se_paper used, tolerance, basis): the printed SE, else the README tolerance, else ours."""
    if _finite(se_paper):
        return float(se_paper), 0.0, "printed"
    if src == README_SOURCE:
        return 0.0, README_TOLERANCE.get(metric, 0.0), "authors' tolerance"
    return (float(se_ours) if _finite(se_ours) else math.nan), 0.0, "assumed = ours"


def judge(ours: float, paper: float, se_ours: float, se_paper: float, src: str = "",
          metric: str = "") -> dict:
    """``{"diff", "se_paper", "tolerance", "basis", "combined_se", "band", "verdict", "reason"}``
    for one comparison (module docstring)."""
    se_paper_used, tolerance, basis = assumed_paper_se(src, metric, se_paper, se_ours)
    diff = ours - paper
    out = {"diff": diff, "se_paper": se_paper_used, "tolerance": tolerance, "basis": basis}
    if not _finite(se_ours):
        equal = abs(diff) <= EQUAL * max(1.0, abs(paper))
        combined = se_paper_used if _finite(se_paper_used) else math.nan
        band = (Z * combined if _finite(combined) else 0.0) + tolerance
        if equal or (_finite(combined) and abs(diff) <= band):
            return {**out, "combined_se": combined, "band": band, "verdict": CONSISTENT,
                    "reason": "equal" if equal else "within the band"}
        return {**out, "combined_se": combined, "band": band, "verdict": UNRESOLVED,
                "reason": "no SE of ours"}
    combined = math.sqrt(se_ours ** 2 + se_paper_used ** 2)
    band = Z * combined + tolerance
    if combined > NOISY_FRACTION * abs(paper):
        verdict, reason = UNRESOLVED, f"too noisy (σ > {NOISY_FRACTION:g} × value)"
    elif abs(diff) <= band + EQUAL * max(1.0, abs(paper)):
        verdict, reason = CONSISTENT, f"|d| ≤ {Z:g}σ" + (" + tolerance" if tolerance else "")
    else:
        verdict, reason = INCONSISTENT, f"|d| > {Z:g}σ" + (" + tolerance" if tolerance else "")
    return {**out, "combined_se": combined, "band": band, "verdict": verdict, "reason": reason}


def counts(verdicts) -> dict[str, int]:
    """How many of each verdict, in ``VERDICTS`` order."""
    verdicts = list(verdicts)
    return {v: sum(1 for x in verdicts if x == v) for v in VERDICTS}


def counts_text(verdicts) -> str:
    c = counts(verdicts)
    return ", ".join(f"{c[v]} {v}" for v in VERDICTS)
