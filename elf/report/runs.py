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
from elf.artifacts.names import EMA_WEIGHTS, RUN_SETTINGS, RUN_STATS, TOKENS_ROUNDS, TOKENS_TEACHER_SEEN
from elf.artifacts.records import run_tokens
from elf.io import read_json, sha256_file
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
            "config_sha256": sha256_file(config_path),
            "tokens": read_json(tokens_path) if has_tokens else None,
            "tokens_path": str(tokens_path) if has_tokens else None,
            "tokens_sha256": sha256_file(tokens_path) if has_tokens else None}


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


def trained_tokens(config: dict) -> int | None:
    """Tokens a run trained on here (steps × batch × L, ``elf.artifacts.records.run_tokens``); None for
    a released checkpoint (trained elsewhere) or when the budget is unknown."""
    if (config.get(RUN_SETTINGS) or {}).get("kind") == "released":
        return None
    return run_tokens(config)


def run_epochs(config: dict) -> float | None:
    """Passes over the training data: trained tokens ÷ valid tokens of the train store (the count
    its normalisation statistics were taken over); None when either is unknown."""
    tokens = trained_tokens(config)
    count = (config.get(RUN_STATS) or {}).get("count")
    if tokens is None or not count:
        return None
    return tokens / float(count)


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
            rounds = [(r["run"], float(r["tokens_seen"])) for r in tokens.get(TOKENS_ROUNDS, [])]
            base = tokens.get(TOKENS_TEACHER_SEEN)
            bars.append(TokenBar(label, "ours", None if base is None else float(base), rounds,
                                 run=run, path=meta["tokens_path"]))
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
