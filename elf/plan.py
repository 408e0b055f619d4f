"""The DAG's plan: which (run, sampler) pairs the figures need, with which seeds, grouped into which
evaluation job, and where each evaluation output lives. Pure functions of an ``Experiment``; the
workflow (``workflow/rules/*.smk``) and the report both call them, so the two cannot disagree.

Evaluation (sampling, scoring and the mean ± SE over seeds) runs as one job per *group*:
- ``evaluation.group_by: run`` (embedded default): one job per run samples and scores every sampler
  the figures need of it (one model load, one scorer load, one Python start-up);
- ``evaluation.group_by: sampler`` (paper config): one job per (run, sampler), so GPU jobs stay small
  and a changed sampler reruns alone.
A group's folder ``<evals root>/<run>/<group>/`` (``<results>/evals`` in the DAG) holds ``samples/<sampler>/seed<k>.jsonl``,
``scores/<sampler>/seed<k>.json`` and ``aggregates/<sampler>.json``.
"""

from __future__ import annotations

from pathlib import Path

from elf.config import Experiment

ALL_SAMPLERS = "all"  # the group name of a run's single evaluation job under group_by: run


def figure_pairs(exp: Experiment, figure_id: str) -> list[tuple[str, str]]:
    """(run, sampler) pairs a figure or table plots, in its order."""
    fig = exp.figures[figure_id]
    return [(run, sampler) for run in fig.runs for sampler in fig.samplers]


def trend_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """(run, sampler) pairs the trend checks compare (``trends``), each once."""
    pairs = {(getattr(t, side).run, getattr(t, side).sampler): None
             for t in exp.trends.values() for side in ("lower", "higher")}
    return list(pairs)


def replicates_of(exp: Experiment, run: str) -> list[str]:
    """The training-seed replicates of ``run`` (runs with ``replicate_of: run``), in config order."""
    return [name for name in exp.runs if exp.run(name).replicate_of == run]


def training_seed_runs(exp: Experiment, run: str) -> list[str]:
    """A run and its training-seed replicates."""
    return [run, *replicates_of(exp, run)]


def review_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """Every (run, sampler) the replication review reads: the figures', and for the trend checks and
    the training-seed spread every sampler of a replicated run on each of its training seeds."""
    pairs: dict[tuple[str, str], None] = {}
    for figure_id in exp.figures:
        for pair in figure_pairs(exp, figure_id):
            pairs.setdefault(pair)
    for run, sampler in trend_pairs(exp):
        for name in training_seed_runs(exp, run):
            pairs.setdefault((name, sampler))
    for run in exp.runs:
        if replicates_of(exp, run):
            for sampler in run_samplers(exp, run):
                for name in training_seed_runs(exp, run):
                    pairs.setdefault((name, sampler))
    return list(pairs)


def upstream_runs(exp: Experiment) -> list[str]:
    """Trained runs that other runs wait on (distillation teachers and inits) and their replicates:
    the DAG's critical path, which the workflow schedules first."""
    needed = {ref for name in exp.runs for ref in (exp.run(name).teacher, exp.run(name).init_from) if ref}
    needed = {run for run in needed if exp.run(run).kind == "train"}
    return [name for name in exp.runs
            if name in needed or exp.run(name).replicate_of in needed]


def _own_samplers(exp: Experiment, run: str) -> dict[str, None]:
    seen: dict[str, None] = {}
    for figure_id in exp.figures:
        for pair_run, sampler in figure_pairs(exp, figure_id):
            if pair_run == run:
                seen.setdefault(sampler)
    for pair_run, sampler in trend_pairs(exp):
        if pair_run == run:
            seen.setdefault(sampler)
    return seen


def run_samplers(exp: Experiment, run: str) -> list[str]:
    """Samplers evaluated for ``run``: those its figures and trend checks need, in first-use order; a
    replicate (``replicate_of``) is evaluated on its run's."""
    parent = exp.run(run).replicate_of
    return list(_own_samplers(exp, parent or run))


def evaluated_runs(exp: Experiment) -> list[str]:
    """Runs with at least one sampler to evaluate, in config order."""
    return [run for run in exp.runs if run_samplers(exp, run)]


def seeds_of(exp: Experiment, run: str, sampler: str) -> tuple[int, ...]:
    """Evaluation seeds of (run, sampler): all if a figure asks for all or a trend check compares it
    (its evaluation-seed spread is part of the check), else the first. A replicate uses its run's."""
    run = exp.run(run).replicate_of or run
    seeds = exp.evaluation.seeds
    wants_all = (run, sampler) in trend_pairs(exp) or any(
        fig.seeds == "all" and run in fig.runs and sampler in fig.samplers
        for fig in exp.figures.values())
    return tuple(seeds) if wants_all else tuple(seeds[:1])


def eval_group(exp: Experiment, run: str, sampler: str) -> str:
    """The evaluation job (group) that makes (run, sampler)'s outputs."""
    return ALL_SAMPLERS if exp.evaluation.group_by == "run" else sampler


def eval_groups(exp: Experiment, run: str) -> dict[str, list[str]]:
    """group → its samplers, for one run."""
    groups: dict[str, list[str]] = {}
    for sampler in run_samplers(exp, run):
        groups.setdefault(eval_group(exp, run, sampler), []).append(sampler)
    return groups


def group_samplers(exp: Experiment, run: str, group: str) -> list[str]:
    """The samplers one evaluation job of ``run`` runs (empty for an unknown group)."""
    return eval_groups(exp, run).get(group, [])


def eval_dir(evals_root: str | Path, run: str, group: str) -> Path:
    return Path(evals_root) / run / group


def pair_dir(evals_root, exp: Experiment, run: str, sampler: str) -> Path:
    """The evaluation folder holding (run, sampler)'s outputs."""
    return eval_dir(evals_root, run, eval_group(exp, run, sampler))


def samples_file(evals_root, exp: Experiment, run: str, sampler: str, seed: int) -> Path:
    return pair_dir(evals_root, exp, run, sampler) / "samples" / sampler / f"seed{seed}.jsonl"


def scores_file(evals_root, exp: Experiment, run: str, sampler: str, seed: int) -> Path:
    return pair_dir(evals_root, exp, run, sampler) / "scores" / sampler / f"seed{seed}.json"


def aggregate_path(evals_root, exp: Experiment, run: str, sampler: str) -> Path:
    return pair_dir(evals_root, exp, run, sampler) / "aggregates" / f"{sampler}.json"


def eval_dirs_of(evals_root, exp: Experiment, pairs) -> list[str]:
    """The evaluation folders that hold ``pairs`` of (run, sampler), each once, in order."""
    return list({str(pair_dir(evals_root, exp, run, sampler)): None for run, sampler in pairs})
