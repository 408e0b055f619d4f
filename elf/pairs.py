"""Which (run, sampler) pairs each figure, table and trend check reads, with which seeds: pure
functions of an ``Experiment`` that the plan (``elf.plan``: what the DAG evaluates) and the report
(what it reads from the folders it is given) both import, so the two cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from elf.config import Experiment
from elf.plan_index import plan_index as _index


@dataclass(frozen=True)
class Needs:
    """What a figure or table reads, declared per id in ``elf.report.registry``."""
    aggregates: bool = True      # the aggregates of its (run, sampler) pairs
    dataset_line: bool = False   # the reference scores of each unconditional dataset ("Dataset" line)
    run_metadata: bool = False   # its runs' config.json, and tokens.json of distillation rounds
    samples: bool = False        # the first seed's samples and scores of its pairs
    trajectory: bool = False     # the trajectory of its first pair


def figure_pairs(exp: Experiment, figure_id: str) -> list[tuple[str, str]]:
    """(run, sampler) pairs a figure or table plots, in its order."""
    fig = exp.figures[figure_id]
    if fig.pairs:  # the figure names its pairs (F8: one sampler per task)
        return [(pair.run, pair.sampler) for pair in fig.pairs]
    return [(run, sampler) for run in fig.runs for sampler in fig.samplers]


def trend_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """(run, sampler) pairs the trend checks compare (``trends``), each once."""
    return list(_index(exp).trend_pairs)


def replicates_of(exp: Experiment, run: str) -> list[str]:
    """The training-seed replicates of ``run`` (runs with ``replicate_of: run``), in config order."""
    return list(_index(exp).replicates.get(run, ()))


def training_seed_runs(exp: Experiment, run: str) -> list[str]:
    """A run and its training-seed replicates."""
    return [run, *replicates_of(exp, run)]


def review_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """Every (run, sampler) the replication review reads: the figures', and for the trend checks and
    the training-seed spread each sampler a replicate is evaluated on, on each training seed."""
    pairs: dict[tuple[str, str], None] = {}
    for figure_id in exp.figures:
        for pair in figure_pairs(exp, figure_id):
            pairs.setdefault(pair)
    for run, sampler in trend_pairs(exp):
        for name in training_seed_runs(exp, run):
            pairs.setdefault((name, sampler))
    replicates = _index(exp).replicates
    for run in exp.runs:
        for replicate in replicates.get(run, ()):
            for sampler in run_samplers(exp, replicate):
                pairs.setdefault((run, sampler))
                pairs.setdefault((replicate, sampler))
    return list(pairs)


def upstream_runs(exp: Experiment) -> list[str]:
    """Trained runs that other runs wait on (distillation teachers and inits) and their replicates:
    the DAG's critical path, which the workflow schedules first."""
    needed = {ref for name in exp.runs for ref in (exp.run(name).teacher, exp.run(name).init_from) if ref}
    needed = {run for run in needed if exp.run(run).kind == "train"}
    return [name for name in exp.runs
            if name in needed or exp.run(name).replicate_of in needed]


def run_samplers(exp: Experiment, run: str) -> list[str]:
    """Samplers evaluated for ``run``: those its figures and trend checks need, in first-use order. A
    replicate (``replicate_of``) is evaluated on those of its run that the run's trend checks compare
    or ``evaluation.replicate_samplers`` names: where a training-seed spread is read."""
    index = _index(exp)
    if run not in index.run_samplers:
        parent = exp.run(run).replicate_of
        if parent is None:
            index.run_samplers[run] = list(index.own_samplers.get(run, ()))
        else:
            wanted = {s for r, s in index.trend_pairs if r == parent} | \
                set(exp.evaluation.replicate_samplers)
            index.run_samplers[run] = [s for s in index.own_samplers.get(parent, ()) if s in wanted]
    return list(index.run_samplers[run])


def evaluated_runs(exp: Experiment) -> list[str]:
    """Runs with at least one sampler to evaluate, in config order."""
    return [run for run in exp.runs if run_samplers(exp, run)]


def seeds_of(exp: Experiment, run: str, sampler: str) -> tuple[int, ...]:
    """Evaluation seeds of (run, sampler): all if a figure asks for all or a trend check compares it
    (its evaluation-seed spread is part of the check), else the first. A replicate uses its run's."""
    run = exp.run(run).replicate_of or run
    seeds = exp.evaluation.seeds
    return tuple(seeds) if (run, sampler) in _index(exp).all_seeds else tuple(seeds[:1])
