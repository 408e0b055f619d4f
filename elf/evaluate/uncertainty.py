"""Standard errors of one evaluation seed's metrics, from its per-sample values (spec §6).

Every number the replication review compares carries an uncertainty even when one evaluation seed
was run: the spread of its own samples (or examples). One estimator per metric, chosen for being
exact where it can be and cheap everywhere:

- **Gen. PPL** is a ratio estimator, exp(Σ NLL_i / Σ n_i) over samples i (NLL_i: a sample's summed
  counted token NLL, n_i its counted targets). Its log, R = Σ NLL_i / Σ n_i, has the delta-method
  (linearisation) variance Var(R) ≈ Σ (NLL_i − R n_i)² / (N (N − 1) n̄²), the standard SE of a ratio
  of means; it is propagated through exp: SE(PPL) = PPL × SE(R). Deterministic (no draws).
- **Entropy** (and any plain mean over samples): sample standard deviation (ddof 1) / sqrt(N).
- **BLEU** (corpus BLEU is not a mean over sentences): the bootstrap over sentences of sacreBLEU's
  significance tools — resample the sentences with replacement ``BOOTSTRAP_RESAMPLES`` times from a
  ``numpy`` generator seeded by the caller, recompute corpus BLEU from the resampled sentences'
  sufficient statistics, and take the standard deviation of the resampled scores.
- **ROUGE** keeps its per-example SE as the authors compute it (elf/evaluate/textmetrics.py).

Several seeds of one (run, sampler) are independent sample sets: the SE of their mean from the
per-seed SEs is sqrt(Σ se_k²) / K (``seed_mean_se``).

    ratio_ppl_se([12.1, 30.4], [5, 11])      # SE of exp(42.5 / 16)
    bleu_bootstrap_se(hyps, refs, seed=0)
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 1000   # sacreBLEU's default number of bootstrap resamples
BOOTSTRAP_SEED = 0           # the seed `elf score` passes (recorded in its metrics_settings)


def ratio_ppl_se(nll_sums: Sequence[float], counts: Sequence[int]) -> float:
    """Delta-method SE of exp(Σ nll / Σ count) over samples (module docstring); nan for < 2 samples
    with a counted target."""
    pairs = [(float(s), float(c)) for s, c in zip(nll_sums, counts) if c]
    n = len(pairs)
    if n < 2:
        return math.nan
    nll = np.array([p[0] for p in pairs])
    cnt = np.array([p[1] for p in pairs])
    ratio = nll.sum() / cnt.sum()
    residual = nll - ratio * cnt
    se_log = math.sqrt(float((residual ** 2).sum()) / (n * (n - 1))) / float(cnt.mean())
    return math.exp(ratio) * se_log


def mean_se(values: Sequence[float | None]) -> float:
    """SE of the mean of the finite values (ddof 1); nan for fewer than 2."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(kept) < 2:
        return math.nan
    return float(np.std(kept, ddof=1)) / math.sqrt(len(kept))


def bleu_bootstrap_se(hyps: Sequence[str], refs: Sequence[str], seed: int = BOOTSTRAP_SEED,
                      resamples: int = BOOTSTRAP_RESAMPLES) -> float:
    """Bootstrap SE of corpus BLEU over sentences, with the settings of ``textmetrics.bleu`` (sacreBLEU's
    paired-bootstrap resampling of sentence statistics); nan for fewer than 2 sentences."""
    from sacrebleu.metrics import BLEU

    from elf.evaluate.textmetrics import BLEU_SETTINGS

    if len(hyps) < 2:
        return math.nan
    metric = BLEU(**BLEU_SETTINGS)
    stats = np.array(metric._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.int64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(stats), size=(resamples, len(stats)))
    scores = [metric._compute_score_from_stats(stats[idx].sum(0).tolist()).score for idx in draws]
    return float(np.std(scores, ddof=1))


def seed_mean_se(per_seed_se: Sequence[float | None]) -> float | None:
    """SE of the mean over K independent seeds from each seed's own SE: sqrt(Σ se_k²) / K (None when
    a seed has none)."""
    values = list(per_seed_se)
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return math.sqrt(sum(v * v for v in values)) / len(values)
