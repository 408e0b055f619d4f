"""The cross-field rules of one run's, one sampler's and one evaluation's settings, shared by plan
time and every stage (issue 26: a hand-run stage refuses what the DAG refuses, with the same words).

``elf.validate.check_rules`` applies them to each entry of a config file (keys ``runs.<name>...``);
the stages apply them to their ``--settings`` / ``--sampler`` / ``--plan`` JSON (keys ``run...``,
``sampler...``), and ``elf.stages.args`` prefixes the option. Each refusal is a ``ConfigError`` naming
the key, the value and what is allowed:

    check_sizes(sizes)                                    # presets: keys, >= 1, heads dividing width
    check_run("runs.base", run, dataset, embedding, sizes)
    check_sampler("samplers.ode64", sampler)              # settings that would have no effect
    check_sampler_for_run("samplers.ode64", sampler, run.objective, task, "figure F4 samples run 'base'")
    check_seeds(seeds)
"""

from __future__ import annotations

from typing import Iterable

from elf.config import (BUILTIN_SIZES, DatasetSettings, EmbeddingSettings, ObjectiveSettings,
                        RunSettings, SamplerSettings)
from elf.typed import ConfigError

SIZE_KEYS = ("depth", "width", "heads")
DISTILL_ONLY = ("teacher", "init_from", "distill")  # settings only a distillation round reads


def check_sizes(sizes: dict, key: str = "sizes") -> None:
    """Extra size presets: exactly depth, width, heads, each >= 1, heads splitting the width into
    even head widths (rotary embeddings rotate channel pairs)."""
    for name, preset in sizes.items():
        where = f"{key}.{name}"
        if not isinstance(preset, dict):
            raise ConfigError(f"config key '{where}': got {preset!r}; expected a mapping of "
                              f"{', '.join(SIZE_KEYS)}")
        unknown = sorted(set(preset) - set(SIZE_KEYS))
        missing = [k for k in SIZE_KEYS if k not in preset]
        if unknown or missing:
            raise ConfigError(f"config key '{where}': got keys {sorted(preset)}; allowed: exactly "
                              f"{', '.join(SIZE_KEYS)}")
        for field in SIZE_KEYS:
            value = preset[field]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"config key '{where}.{field}': got {value!r}; allowed: an "
                                  "integer >= 1")
        check_heads(where, preset["width"], preset["heads"], rope=True)


def check_heads(key: str, width: int, heads: int, *, rope: bool, width_key: str = "width") -> None:
    """Attention splits the width into equal heads; rotary embeddings rotate channel pairs."""
    if width % heads or (rope and (width // heads) % 2):
        need = "an even head width" if rope else "equal heads"
        raise ConfigError(f"config key '{key}.heads': got {heads} for {width_key} {width}; allowed: a "
                          f"divisor of {width_key} leaving {need}")


def check_run(key: str, run: RunSettings, dataset: DatasetSettings, embedding: EmbeddingSettings,
              sizes: dict, *, dataset_name: str | None = None,
              embedding_name: str | None = None) -> None:
    """Every rule one run obeys given its dataset, embedding and the size presets."""
    names = (*BUILTIN_SIZES, *sizes)
    if run.model.size not in names:
        raise ConfigError(f"config key '{key}.model.size': got {run.model.size!r}; allowed: "
                          f"{', '.join(names)}")
    b, o = run.budget, run.objective
    if b.batch_size % b.grad_accum:
        raise ConfigError(f"config key '{key}.budget.grad_accum': got {b.grad_accum}; allowed: a "
                          f"divisor of budget.batch_size {b.batch_size}")
    cap = dataset.max_train_sequences
    if cap and b.batch_size > cap and run.kind != "released":
        raise ConfigError(f"config key '{key}.budget.batch_size': got {b.batch_size}, more than the "
                          f"{cap} training sequences of its dataset (max_train_sequences); allowed: "
                          f"at most {cap}")
    if o.sc_cfg_min > o.sc_cfg_max:
        raise ConfigError(f"config key '{key}.objective.sc_cfg_min': got {o.sc_cfg_min} above "
                          f"sc_cfg_max {o.sc_cfg_max}; allowed: sc_cfg_min <= sc_cfg_max")
    if not all(0 <= beta < 1 for beta in run.optim.betas):
        raise ConfigError(f"config key '{key}.optim.betas': got {list(run.optim.betas)}; allowed: "
                          "two numbers in [0, 1)")
    if dataset.task == "unconditional" and o.label_drop_prob > 0:
        raise ConfigError(f"config key '{key}.objective.label_drop_prob': got {o.label_drop_prob} on "
                          f"the unconditional dataset '{dataset_name or dataset.name}'; allowed: 0 "
                          "(there is no source to drop)")
    emb = embedding
    if (emb.kind == "learned" or not emb.cache) and (emb.cache or emb.normalization != "fixed"):
        raise ConfigError(f"config key 'embeddings.{embedding_name or run.embedding}': kind "
                          f"{emb.kind!r} with cache {emb.cache} and normalization {emb.normalization!r}: "
                          "a learned table cannot be cached (set cache: false), and uncached "
                          "embeddings need normalization: fixed")
    _check_kind(key, run)
    if run.decoder is not None and (run.model.decode_head or run.objective.decode_prob != 0):
        raise ConfigError(f"config key '{key}.decoder': a run with a separate decoder needs "
                          "model.decode_head: false and objective.decode_prob: 0.0 (got "
                          f"{run.model.decode_head}, {run.objective.decode_prob})")


def _check_kind(key: str, run: RunSettings) -> None:
    """A distillation round names its teacher and round; no other kind reads those settings."""
    if run.kind == "distill" and (run.teacher is None or run.distill is None):
        raise ConfigError(f"config key '{key}': a distill run needs `teacher` and `distill`")
    if run.kind != "distill":
        given = [field for field in DISTILL_ONLY if getattr(run, field) is not None]
        if given:
            raise ConfigError(f"config key '{key}.{given[0]}': set on a run of kind {run.kind!r}, which "
                              "ignores it; allowed: only on kind 'distill' (remove it, or set kind: "
                              "distill)")
    if run.kind == "released" and not run.released:
        raise ConfigError(f"config key '{key}.released': a released run needs its id")


def check_sampler(key: str, sampler: SamplerSettings) -> None:
    """A sampler setting on its own: no setting the method ignores."""
    if sampler.method == "ode" and sampler.gamma != 0:
        raise ConfigError(f"config key '{key}.gamma': got {sampler.gamma} on an ODE sampler, which "
                          "re-injects no noise; allowed: 0 with method ode (or method: sde)")


def check_sampler_for_run(key: str, sampler: SamplerSettings, objective: ObjectiveSettings, task: str,
                          used_by: str, *, input_cfg: bool = True) -> None:
    """A sampler against the run it samples: SC-CFG within the trained range, input CFG only where
    there is a source. ``used_by`` says who pairs them (a figure, a command line). Plan time passes
    ``input_cfg=False``: a figure may show one conditional sampler on every task (F8), and the plan
    hands an unconditional run the setting it takes effect as (``elf.plan.effective_sampler``)."""
    o = objective
    if not o.sc_cfg_min <= sampler.sc_cfg <= o.sc_cfg_max:
        raise ConfigError(f"config key '{key}.sc_cfg': got {sampler.sc_cfg}, but {used_by}, trained "
                          f"with SC-CFG in [{o.sc_cfg_min}, {o.sc_cfg_max}] (objective.sc_cfg_min/max); "
                          "allowed: a scale in that range")
    if input_cfg and task == "unconditional" and sampler.input_cfg != 1:
        raise ConfigError(f"config key '{key}.input_cfg': got {sampler.input_cfg}, but {used_by}, "
                          "which is unconditional and has no source to guide; allowed: 1.0 there")


def check_seeds(seeds: Iterable[int], key: str = "evaluation.seeds") -> None:
    seeds = list(seeds)
    if not seeds:
        raise ConfigError(f"config key '{key}': got []; allowed: one or more seeds")
    bad = [s for s in seeds if s < 0]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if bad or repeated:
        what = f"negative {bad}" if bad else f"repeated {repeated}"
        raise ConfigError(f"config key '{key}': got {seeds} ({what}); allowed: distinct seeds >= 0")
