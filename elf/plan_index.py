"""What ``elf.plan`` looks up about an ``Experiment``, built once in one pass over its runs, figures
and trends (issue 26: planning stays linear in their number; before, every run's samplers and
replicates were found by scanning every run and figure again).

    index = plan_index(exp)      # cached on the Experiment, outside its fields
"""

from __future__ import annotations

from dataclasses import dataclass

from elf.config import Experiment


@dataclass(frozen=True)
class PlanIndex:
    """What the plan functions look up, built once per ``Experiment`` in one pass over its runs,
    figures and trends, so that planning stays linear in their number (issue 26)."""
    replicates: dict[str, list[str]]            # run -> its replicates, in config order
    trend_pairs: list[tuple[str, str]]          # each compared (run, sampler) once, in order
    own_samplers: dict[str, dict[str, None]]    # run -> samplers its figures and trends need
    all_seeds: frozenset[tuple[str, str]]       # pairs a figure asks all seeds of, or a trend compares
    run_samplers: dict[str, list[str]]          # filled as asked
    run_order: dict[str, int]                   # run -> its position in the config


def plan_index(exp: Experiment) -> PlanIndex:
    found = exp.__dict__.get("_plan_index")  # kept outside the fields: equality ignores it
    if found is not None:
        return found
    replicates: dict[str, list[str]] = {}
    for name in exp.runs:
        parent = exp.run(name).replicate_of
        if parent is not None:
            replicates.setdefault(parent, []).append(name)
    trends = list({(getattr(t, side).run, getattr(t, side).sampler): None
                   for t in exp.trends.values() for side in ("lower", "higher")})
    own: dict[str, dict[str, None]] = {}
    all_seeds = set(trends)
    for fig in exp.figures.values():
        for run, sampler in ((run, sampler) for run in fig.runs for sampler in fig.samplers):
            own.setdefault(run, {}).setdefault(sampler)
            if fig.seeds == "all":
                all_seeds.add((run, sampler))
    for run, sampler in trends:
        own.setdefault(run, {}).setdefault(sampler)
    index = PlanIndex(replicates, trends, own, frozenset(all_seeds), {},
                   {name: i for i, name in enumerate(exp.runs)})
    exp.__dict__["_plan_index"] = index
    return index
