"""The evaluation folders the report is given (``elf report --evals DIR …``: its rule's inputs) and
which (run, sampler) each holds, found from the folders themselves, never from the plan.

A folder is ``<evals>/<run>/<group>/`` (``elf.artifacts.layout.eval_dir``), holding
``aggregates/<sampler>.json`` for each sampler its job evaluated, and the samples and scores beside
them; the aggregate names its run and sampler, and ``load_rows`` checks that it is the one asked for.

    folders = EvalFolders.of(["results/evals/base/all", "results/evals/wmt/all"])
    folders.aggregate("base", "sde32")     # results/evals/base/all/aggregates/sde32.json
    folders.samples("base", "sde32", 0)    # results/evals/base/all/samples/sde32/seed0.jsonl
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from elf.artifacts import layout


AGGREGATE_RULE = "the `evaluate` rule (`elf evaluate`: sample, score, aggregate)"


class MissingInputError(FileNotFoundError):
    """An input file the report needs does not exist; the message names it and the rule that makes it."""


@dataclass(frozen=True)
class EvalFolders:
    folders: tuple[Path, ...]
    _by_run: dict[str, list[Path]] = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        by_run: dict[str, list[Path]] = {}
        for folder in self.folders:
            by_run.setdefault(layout.eval_dir_run(folder), []).append(folder)
        object.__setattr__(self, "_by_run", by_run)  # derived from the folders, once

    @classmethod
    def of(cls, folders: Iterable[str | Path]) -> "EvalFolders":
        return cls(tuple(dict.fromkeys(Path(f) for f in folders)))

    @classmethod
    def under(cls, evals: str | Path) -> "EvalFolders":
        """Every evaluation folder under a root ``<evals>/<run>/<group>/`` (a hand-run report)."""
        return cls.of(layout.eval_dirs_under(evals))

    def _locate(self, run: str, path_in: Callable[[Path], Path], what: str) -> Path:
        """``path_in(folder)`` for the given folder of ``run`` where it exists; with one folder of the
        run, that path even if missing (the caller names it); otherwise a ``MissingInputError``."""
        candidates = [path_in(folder) for folder in self._by_run.get(run, ())]
        for path in candidates:
            if path.exists():
                return path
        if len(candidates) == 1:
            return candidates[0]
        where = (f"none of {', '.join(map(str, candidates))} exists" if candidates else
                 f"no folder of run {run} was given (--evals, --evals-from)")
        raise MissingInputError(f"missing {what}: {where}; it is made by {AGGREGATE_RULE}: run that "
                                "rule or the whole DAG first")

    def aggregate(self, run: str, sampler: str) -> Path:
        return self._locate(run, lambda f: layout.aggregate_file(f, sampler),
                            f"aggregate of run {run}, sampler {sampler}")

    def samples(self, run: str, sampler: str, seed: int) -> Path:
        return self._locate(run, lambda f: layout.samples_path(f, sampler, seed),
                            f"samples of run {run}, sampler {sampler}, seed {seed}")

    def scores(self, run: str, sampler: str, seed: int) -> Path:
        return self._locate(run, lambda f: layout.scores_path(f, sampler, seed),
                            f"scores of run {run}, sampler {sampler}, seed {seed}")
