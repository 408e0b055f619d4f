"""Run metadata: what the runs were (their ``config.json``) and how many tokens they saw (a distillation
round's ``tokens.json``), for the configuration tables (T6-T8), the token bars (F7c, F9b) and the
review's configuration checks; and the paper's Table 8 token counts as bars beside ours.

Reads (never writes) ``<runs_root>/<run>/config.json`` and ``tokens.json`` (``load_runs_meta``), the
files beside each run's weights (``elf.artifacts.layout``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from elf.artifacts.layout import run_config_file, run_dir, run_tokens_file
from elf.artifacts.names import (EMA_WEIGHTS, RUN_MODEL, RUN_SETTINGS, RUN_STATS, RUN_TOKENS_FINGERPRINT,
                                 RUN_TRAIN_ROWS, TOKENS_ROUNDS, TOKENS_TEACHER_SEEN)
from elf.artifacts.records import run_tokens
from elf.artifacts import file_sha256, read_json
from elf.report.results import MissingInputError

RUN_RULE = "the run's rule (`train`, `distill` or `released`)"
BILLION = 1e9


def load_run_meta(runs_root: str | Path, run: str) -> dict:
    """One run's metadata: ``{"run", "config", "config_path", "config_sha256", "tokens",
    "tokens_path", "tokens_sha256"}`` (``tokens*`` are None for runs without tokens.json)."""
    config_path = run_config_file(runs_root, run)
    if not config_path.is_file():
        raise MissingInputError(
            f"missing run metadata {config_path}; it is written with the checkpoint by "
            f"{RUN_RULE}: run `snakemake {run_dir(runs_root, run) / EMA_WEIGHTS}`")
    tokens_path = run_tokens_file(runs_root, run)
    has_tokens = tokens_path.is_file()
    return {"run": run, "config": read_json(config_path), "config_path": str(config_path),
            "config_sha256": file_sha256(config_path),
            "tokens": read_json(tokens_path) if has_tokens else None,
            "tokens_path": str(tokens_path) if has_tokens else None,
            "tokens_sha256": file_sha256(tokens_path) if has_tokens else None}


def load_runs_meta(runs_root: str | Path, runs: Iterable[str]) -> dict[str, dict]:
    """``load_run_meta`` of each run, in order."""
    return {run: load_run_meta(runs_root, run) for run in dict.fromkeys(runs)}


def metadata_entries(runs_meta: dict[str, dict]) -> list[dict]:
    """The metadata files behind a figure or table (path, sha256, run) for its provenance."""
    entries = []
    for run, meta in runs_meta.items():
        entries.append({"path": meta["config_path"], "sha256": meta["config_sha256"], "run": run})
        if meta.get("tokens_path"):
            entries.append({"path": meta["tokens_path"], "sha256": meta["tokens_sha256"],
                            "run": run})
    return entries


# How the paper counts (T8, F7c, F9b, T6/T7 epochs and warm-up): training tokens are valid (non-pad)
# tokens — 45.2B for ELF-B = 5 epochs × 9.04B valid OWT tokens — not steps × batch × L slots, which
# count every padding position of a padded row (49.8B for R01's budget). A run's config.json records
# the train store's valid-token count (``normalization_stats.count``) and its rows (``train_rows``);
# an epoch is one pass over the rows, and the valid tokens seen are epochs × the valid count.

def token_slots(config: dict) -> int | None:
    """steps × batch × L of a run trained here (``elf.artifacts.records.run_tokens``); None for a
    released checkpoint (trained elsewhere) or when the budget is unknown."""
    if (config.get(RUN_SETTINGS) or {}).get("kind") == "released":
        return None
    return run_tokens(config)


def train_rows(config: dict) -> int | None:
    """Rows of the run's training data (``train_rows``, else its token fingerprint's ``num_rows``)."""
    rows = config.get(RUN_TRAIN_ROWS) or (config.get(RUN_TOKENS_FINGERPRINT) or {}).get("num_rows")
    return int(rows) if rows else None


def valid_count(config: dict) -> float | None:
    """Valid (non-pad) tokens of the train store, as its statistics counted them."""
    count = (config.get(RUN_STATS) or {}).get("count")
    return float(count) if count else None


def valid_fraction(config: dict) -> float | None:
    """Valid tokens per token slot of the training data: count ÷ (rows × L); None if unknown."""
    rows, count = train_rows(config), valid_count(config)
    length = (config.get(RUN_MODEL) or {}).get("max_length")
    if not rows or not count or not length:
        return None
    return count / (rows * float(length))


def run_epochs(config: dict) -> float | None:
    """Passes over the training data: steps × batch ÷ rows (the paper's epochs); where the run
    records no row count, token slots ÷ valid tokens (an overcount when rows are padded); None
    when unknown."""
    slots, rows = token_slots(config), train_rows(config)
    if slots is None:
        return None
    budget = config[RUN_SETTINGS]["budget"]
    if rows:
        return int(budget["steps"]) * int(budget["batch_size"]) / rows
    count = valid_count(config)
    return slots / count if count else None


def trained_tokens(config: dict) -> float | None:
    """Valid tokens a run trained on (epochs × the store's valid count, ``token_basis`` "valid");
    token slots where the run records no row count (basis "slots"); None for a released run."""
    slots = token_slots(config)
    fraction = valid_fraction(config)
    if slots is None or fraction is None:
        return slots
    return slots * fraction


def token_basis(config: dict) -> str:
    """How ``trained_tokens`` counted: "valid" (non-pad tokens) or "slots" (steps × batch × L)."""
    return "valid" if valid_fraction(config) is not None else "slots"


def authors_steps(config: dict, epochs: int) -> int | None:
    """The step budget the authors' code derives: ⌊rows / batch⌋ × epochs (None without a row count)."""
    rows = train_rows(config)
    if not rows:
        return None
    return rows // int(config[RUN_SETTINGS]["budget"]["batch_size"]) * int(epochs)


@dataclasses.dataclass
class TokenBar:
    """One training-token bar: base training plus the distillation rounds on top (tokens)."""
    label: str
    source: str                       # "ours" or "paper"
    base: float | None                # base-training tokens (a distilled model: its teacher's)
    rounds: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # (round, tokens)
    run: str | None = None
    path: str | None = None           # the metadata file the numbers come from (ours)

    @property
    def distill(self) -> float:
        return float(sum(tokens for _, tokens in self.rounds))

    @property
    def total(self) -> float | None:
        return None if self.base is None else self.base + self.distill

    def ratio(self, reference: float | None) -> float | None:
        """Total over a reference (the paper's "× ELF" column)."""
        return None if self.total is None or not reference else self.total / reference


def _final_rounds(runs_meta: dict[str, dict]) -> set[str]:
    """Distillation runs that are no earlier round of another listed run's chain."""
    earlier = set()
    for meta in runs_meta.values():
        rounds = (meta.get("tokens") or {}).get(TOKENS_ROUNDS, [])
        earlier |= {r["run"] for r in rounds[:-1]}
    return {run for run, meta in runs_meta.items() if meta.get("tokens") and run not in earlier}


def our_token_bars(runs_meta: dict[str, dict], labels: dict[str, str] | None = None
                   ) -> list[TokenBar]:
    """A bar per trained run (its own tokens) and per final distillation round (its teacher's
    tokens + every round of its chain, from its ``tokens.json``), in ``runs_meta`` order."""
    finals = _final_rounds(runs_meta)
    bars = []
    for run, meta in runs_meta.items():
        label = (labels or {}).get(run, run)
        tokens = meta.get("tokens")
        if tokens is None:
            bars.append(TokenBar(label, "ours", trained_tokens(meta["config"]), run=run,
                                 path=meta["config_path"]))
        elif run in finals:
            # tokens.json counts slots; the round's own store (the teacher's) gives the valid share
            fraction = valid_fraction(meta["config"]) or 1.0
            rounds = [(r["run"], float(r["tokens_seen"]) * fraction)
                      for r in tokens.get(TOKENS_ROUNDS, [])]
            base = tokens.get(TOKENS_TEACHER_SEEN)
            bars.append(TokenBar(label, "ours", None if base is None else float(base) * fraction,
                                 rounds, run=run, path=meta["tokens_path"]))
    return bars


def paper_tokens(paper_values: dict) -> dict[str, float]:
    """The paper's Table 8 totals per model, in tokens (its values are in billions)."""
    entries = (paper_values.get("table_8") or {}).get("entries", [])
    return {e["model"]: float(round(float(e["value"]) * BILLION)) for e in entries}


def paper_token_bar(paper_values: dict, label: str, base_model: str,
                    total_model: str | None = None, total: float | None = None) -> TokenBar:
    """A paper bar: ``base_model``'s Table 8 tokens, topped up to ``total_model``'s (or ``total``)
    as "extra distillation"."""
    tokens = paper_tokens(paper_values)
    base = tokens.get(base_model)
    top = tokens.get(total_model) if total_model else total
    rounds = [("extra distillation", top - base)] if base is not None and top is not None \
        and top > base else []
    return TokenBar(label, "paper", base, rounds)


def paper_pd_tokens(paper_values: dict) -> float | None:
    """ELF+PD's total training tokens as the paper states them (v2 Fig. 9b: 90B), in tokens."""
    extra = (paper_values.get("table_8") or {}).get("not_in_table") or {}
    value = extra.get("ELF-B+PD_train_tokens_B")
    return None if value is None else float(round(float(value) * BILLION))
