"""Plan-time validation: everything ``snakemake -n`` refuses before any rule runs.

``elf.config`` checks each key's type and range; this module adds what needs the whole file:
- ``load_yaml(path)``: a config file read strictly: a duplicate key (which Snakemake's loader resolves
  silently to the last value) or a syntax error stops with the file and line;
- ``check_rules(exp)``: the cross-field rules, called by ``parse_experiment`` (so the report stage and
  tests apply them too): names the paths, wildcards and shell commands can carry, model-size presets,
  batch splitting, SC-CFG ranges against the runs sampled with them, settings that would have no
  effect (label drop or input CFG without a source, BLEU/ROUGE of an unconditional run), evaluation
  seeds, distillation chains (same dataset and embedding, no cycle);
- ``check_filesystem(exp)``: the output roots can be created and written, every local input the
  config names exists, and a pretrained model is an existing folder or a Hub id (reads only: nothing
  is created);
- ``validate_workflow_config(config, configfiles)``: the entry point ``workflow/rules/common.smk``
  calls: all of the above. ``elf check`` runs the same on a file.

Every refusal is a ``ConfigError`` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path
from typing import Iterable

import yaml

from elf.config import BUILTIN_SIZES, ConfigError, Experiment, RunSettings, parse_experiment

# Names become path components, wildcard values and unquoted shell words.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
NAME_RULE = "letters, digits and _ . + - (starting with a letter or digit)"
# Output roots are pasted unquoted into every rule's shell command.
PATH = re.compile(r"^[A-Za-z0-9_.+/-]+$")
PATH_RULE = "a non-empty path of letters, digits and _ . + - / (no spaces, quotes, ~ or $)"
# Hugging Face repo ids: one optional owner, segments of word characters, '.' and '-'.
HUB_ID = re.compile(r"^(?!.*(--|\.\.))[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
NAMED_TABLES = ("encoders", "datasets", "embeddings", "decoders", "sizes", "runs", "samplers",
                "figures")
SIZE_KEYS = ("depth", "width", "heads")
# Figures and tables that show BLEU / ROUGE only (elf/report: T1 and F17's two panels).
CONDITIONAL_METRIC_IDS = ("T1", "F17")


# --------------------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------------------

class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser: 10x faster
    """SafeLoader that refuses a key given twice in one mapping (merge keys ``<<`` may override)."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            where = getattr(loader, "name", key_node.start_mark.name)  # libyaml marks name no file
            raise ConfigError(f"{where}:{line}: duplicate key {key!r} (first given at line "
                              f"{seen[key]}); allowed: each key once per mapping")
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def load_yaml(path: str | os.PathLike) -> dict:
    """A config file as a mapping; a syntax error, a duplicate key or a non-mapping names the file
    and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the config file ({err})") from err
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {err.problem or err.context}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from err
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, got "
                          f"{type(data).__name__}")
    return data


# --------------------------------------------------------------------------------------------------
# Cross-field rules
# --------------------------------------------------------------------------------------------------

def check_rules(exp: Experiment) -> None:
    """Every rule that needs more than one key; see the module docstring."""
    _check_names(exp)
    _check_sizes(exp)
    _check_widths(exp)
    for name, ds in exp.datasets.items():
        if ds.task == "unconditional" and ds.max_input_length is not None:
            raise ConfigError(f"config key 'datasets.{name}.max_input_length': got "
                              f"{ds.max_input_length} on an unconditional dataset; allowed: null "
                              "(only conditional rows have a source to cap)")
    runs = {name: exp.run(name) for name in exp.runs}
    for name, run in runs.items():
        _check_run(exp, name, run)
    _check_chains(runs)
    _check_replicates(exp, runs)
    _check_seeds(exp.evaluation.seeds)
    for sampler in exp.evaluation.replicate_samplers:
        if sampler not in exp.samplers:
            raise ConfigError(f"config key 'evaluation.replicate_samplers': '{sampler}' is not defined "
                              f"under 'samplers'; defined: {', '.join(exp.samplers)}")
    for fid in exp.figures:
        _check_figure(exp, fid, runs)


def _check_names(exp: Experiment) -> None:
    for key in ("results", "reports"):
        value = getattr(exp, key)
        if not PATH.match(value) or not value.strip("/"):
            raise ConfigError(f"config key '{key}': got {value!r}; allowed: {PATH_RULE}, not the "
                              "file-system root")
    for table in NAMED_TABLES:
        for name in getattr(exp, table):
            if not NAME.match(name):
                raise ConfigError(f"config key '{table}': the name {name!r} cannot be carried by the "
                                  f"rules' paths, wildcards and shell commands; allowed: {NAME_RULE}")


def _check_sizes(exp: Experiment) -> None:
    for name, preset in exp.sizes.items():
        key = f"sizes.{name}"
        unknown = sorted(set(preset) - set(SIZE_KEYS))
        missing = [k for k in SIZE_KEYS if k not in preset]
        if unknown or missing:
            raise ConfigError(f"config key '{key}': got keys {sorted(preset)}; allowed: exactly "
                              f"{', '.join(SIZE_KEYS)}")
        for field in SIZE_KEYS:
            if preset[field] < 1:
                raise ConfigError(f"config key '{key}.{field}': got {preset[field]}; allowed: >= 1")
        _check_heads(key, preset["width"], preset["heads"], rope=True)


def _check_heads(key: str, width: int, heads: int, *, rope: bool, width_key: str = "width") -> None:
    """Attention splits the width into equal heads; rotary embeddings rotate channel pairs."""
    if width % heads or (rope and (width // heads) % 2):
        need = "an even head width" if rope else "equal heads"
        raise ConfigError(f"config key '{key}.heads': got {heads} for {width_key} {width}; allowed: a "
                          f"divisor of {width_key} leaving {need}")


def _check_widths(exp: Experiment) -> None:
    for name, enc in exp.encoders.items():
        if enc.source == "build":
            _check_heads(f"encoders.{name}", enc.d_model, enc.heads, rope=False, width_key="d_model")
    if exp.scorer.source == "build":
        _check_heads("scorer", exp.scorer.width, exp.scorer.heads, rope=False)
    for name, dec in exp.decoders.items():
        _check_heads(f"decoders.{name}", dec.width, dec.heads, rope=True)


def _check_run(exp: Experiment, name: str, run: RunSettings) -> None:
    key = f"runs.{name}"
    sizes = (*BUILTIN_SIZES, *exp.sizes)
    if run.model.size not in sizes:
        raise ConfigError(f"config key '{key}.model.size': got {run.model.size!r}; allowed: "
                          f"{', '.join(sizes)}")
    b, o = run.budget, run.objective
    if b.batch_size % b.grad_accum:
        raise ConfigError(f"config key '{key}.budget.grad_accum': got {b.grad_accum}; allowed: a "
                          f"divisor of budget.batch_size {b.batch_size}")
    if o.sc_cfg_min > o.sc_cfg_max:
        raise ConfigError(f"config key '{key}.objective.sc_cfg_min': got {o.sc_cfg_min} above "
                          f"sc_cfg_max {o.sc_cfg_max}; allowed: sc_cfg_min <= sc_cfg_max")
    if not all(0 <= beta < 1 for beta in run.optim.betas):
        raise ConfigError(f"config key '{key}.optim.betas': got {list(run.optim.betas)}; allowed: "
                          "two numbers in [0, 1)")
    dataset = exp.datasets[run.dataset]
    if dataset.task == "unconditional" and o.label_drop_prob > 0:
        raise ConfigError(f"config key '{key}.objective.label_drop_prob': got {o.label_drop_prob} on "
                          f"the unconditional dataset '{run.dataset}'; allowed: 0 (there is no "
                          "source to drop)")
    if run.kind == "distill":
        _check_distill_inputs(exp, name, run)


def _check_distill_inputs(exp: Experiment, name: str, run: RunSettings) -> None:
    """A student learns the teacher's flow on the same data: same dataset and embedding."""
    for role in ("teacher", "init_from"):
        other = getattr(run, role)
        if other is None:
            continue
        if other == name:
            raise ConfigError(f"config key 'runs.{name}.{role}': got '{other}', the run itself; "
                              "allowed: another run")
        theirs = exp.run(other)
        for field in ("dataset", "embedding"):
            if getattr(theirs, field) != getattr(run, field):
                raise ConfigError(
                    f"config key 'runs.{name}.{role}': run '{other}' is trained on {field} "
                    f"'{getattr(theirs, field)}' but '{name}' on '{getattr(run, field)}'; allowed: a "
                    f"{role.replace('_from', '')} run with the same {field}")


def _check_chains(runs: dict[str, RunSettings]) -> None:
    """Distillation rounds wait for their teacher and init run: a cycle would wait forever."""
    needs = {name: [r for r in (run.teacher, run.init_from) if r] for name, run in runs.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise ConfigError(f"config key 'runs.{cycle[0]}': distillation cycle "
                              f"{' -> '.join(cycle)} (each run waits for the next through its "
                              "teacher or init_from); allowed: a chain that ends in a trained run")
        if name in done:
            return
        for other in needs.get(name, []):
            visit(other, path + [name])
        done.add(name)

    for name in runs:
        visit(name, [])


def _check_replicates(exp: Experiment, runs: dict[str, RunSettings]) -> None:
    """A replicate differs from its run in the training seed only, so their spread is the seed's."""
    for name, run in runs.items():
        parent = run.replicate_of
        if parent is None:
            continue
        key = f"runs.{name}.replicate_of"
        if parent not in runs or parent == name or runs[parent].replicate_of is not None:
            raise ConfigError(f"config key '{key}': got {parent!r}; allowed: another run that is not "
                              "itself a replicate")
        theirs = runs[parent]
        if run.kind != "train" or theirs.kind != "train":
            raise ConfigError(f"config key '{key}': '{name}' and '{parent}' must both be trained runs "
                              "(kind train)")
        if run.budget.seed == theirs.budget.seed:
            raise ConfigError(f"config key 'runs.{name}.budget.seed': got {run.budget.seed}, the seed of "
                              f"'{parent}'; allowed: another seed (a replicate differs by its seed)")
        mine = dataclasses.replace(run, budget=dataclasses.replace(run.budget, seed=0),
                                   paper_run=None, replicate_of=None)
        same = dataclasses.replace(theirs, budget=dataclasses.replace(theirs.budget, seed=0),
                                   paper_run=None, replicate_of=None)
        if mine != same:
            diff = [f.name for f in dataclasses.fields(RunSettings)
                    if getattr(mine, f.name) != getattr(same, f.name)]
            raise ConfigError(f"config key 'runs.{name}': a replicate of '{parent}' differs from it in "
                              f"{', '.join(diff)}; allowed: budget.seed (and paper_run) only")


def _check_seeds(seeds: Iterable[int]) -> None:
    seeds = list(seeds)
    if not seeds:
        raise ConfigError("config key 'evaluation.seeds': got []; allowed: one or more seeds")
    bad = [s for s in seeds if s < 0]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if bad or repeated:
        what = f"negative {bad}" if bad else f"repeated {repeated}"
        raise ConfigError(f"config key 'evaluation.seeds': got {seeds} ({what}); allowed: distinct "
                          "seeds >= 0")


def _check_figure(exp: Experiment, fid: str, runs: dict[str, RunSettings]) -> None:
    fig = exp.figures[fid]
    tasks = {run: exp.datasets[runs[run].dataset].task for run in fig.runs}
    if fid in CONDITIONAL_METRIC_IDS:
        plain = [run for run, task in tasks.items() if task == "unconditional"]
        if plain:
            raise ConfigError(f"config key 'figures.{fid}.runs': {', '.join(plain)} is unconditional, "
                              f"but {fid} shows BLEU / ROUGE; allowed: translation or summarization "
                              "runs")
    for sampler in fig.samplers:
        s = exp.samplers[sampler]
        if fig.runs and s.input_cfg != 1 and all(t == "unconditional" for t in tasks.values()):
            raise ConfigError(f"config key 'samplers.{sampler}.input_cfg': got {s.input_cfg}, but "
                              f"figure {fid} samples only unconditional runs ({', '.join(fig.runs)}), "
                              "which have no source to guide; allowed: 1.0 there")
        for run in fig.runs:
            o = runs[run].objective
            if not o.sc_cfg_min <= s.sc_cfg <= o.sc_cfg_max:
                raise ConfigError(
                    f"config key 'samplers.{sampler}.sc_cfg': got {s.sc_cfg}, but figure {fid} samples "
                    f"run '{run}', trained with SC-CFG in [{o.sc_cfg_min}, {o.sc_cfg_max}] "
                    f"(runs.{run}.objective.sc_cfg_min/max); allowed: a scale in that range")


# --------------------------------------------------------------------------------------------------
# The file system (read only)
# --------------------------------------------------------------------------------------------------

def check_filesystem(exp: Experiment) -> None:
    """Output roots that can be made and written; local inputs that exist. Creates nothing."""
    for key in ("results", "reports"):
        _check_writable(key, Path(getattr(exp, key)))
    for name, ds in exp.datasets.items():
        if ds.source == "local" and not Path(ds.name).exists():
            raise ConfigError(f"config key 'datasets.{name}.name': the local dataset {ds.name!r} does "
                              "not exist; allowed: an existing file or folder")
        # authors: `{split}` stands for train and validation (elf.data.authors.split_refs)
        refs = {ds.name.replace("{split}", split) for split in ("train", "validation")}
        missing = sorted(r for r in refs if _looks_local(r) and not Path(r).exists())
        if ds.source in ("hub", "authors") and missing:
            raise ConfigError(f"config key 'datasets.{name}.name': {missing[0]!r} is a path that does "
                              "not exist, and a path is never sent to the Hub; allowed: an existing "
                              "folder or a Hub id")
    for section, settings in (("tokenizer", exp.tokenizer), ("scorer", exp.scorer),
                              *((f"encoders.{n}", e) for n, e in exp.encoders.items())):
        ref = settings.name_or_path
        if settings.source == "pretrained" and not Path(ref).exists() and \
                (_looks_local(ref) or not HUB_ID.match(ref)):
            raise ConfigError(f"config key '{section}.name_or_path': got {ref!r}, which is no local "
                              "folder (a path is never sent to the Hub); allowed with source "
                              "pretrained: an existing folder or a Hugging Face id (name or owner/name)")
    for name in exp.runs:
        released = exp.run(name).released
        if released and _looks_local(released) and not Path(released).exists():
            raise ConfigError(f"config key 'runs.{name}.released': the local checkpoint {released!r} "
                              "does not exist (a path is never sent to the Hub); allowed: an existing "
                              "file or folder, or a Hub id owner/name")


def _looks_local(ref: str) -> bool:
    """An explicit path: absolute, or relative to ./ or ../ (a Hub id never starts so)."""
    return ref.startswith(("/", "./", "../", "~"))


def _check_writable(key: str, path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ConfigError(f"config key '{key}': {str(path)!r} is a file; allowed: a folder")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"config key '{key}': {str(path)!r} lies under the file {str(parent)!r}; "
                          "allowed: a path under a folder")
    if not _can_write(parent):
        raise ConfigError(f"config key '{key}': {str(path)!r} cannot be written ({str(parent)!r} is "
                          "not writable by this user); allowed: a writable location")


def _can_write(folder: Path) -> bool:
    """Permission bits, then a probe (root passes every bit check, also on /proc or a read-only
    mount): an empty folder made and removed at once."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".elf-probe-", dir=folder))
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# The entry point of the workflow
# --------------------------------------------------------------------------------------------------

def exit_on_bad_yaml(path: str | os.PathLike) -> None:
    """For the Snakefile's default ``configfile:``: stop with the file and line of a syntax error
    (Snakemake's loader names neither; a ``--configfile`` is loaded by its command line first)."""
    try:
        load_yaml(path)
    except ConfigError as err:
        raise SystemExit(f"Invalid configuration: {err}") from None


def validate_workflow_config(config: dict, configfiles: Iterable[str | os.PathLike] = ()) -> Experiment:
    """What ``common.smk`` runs before any rule: each config file read strictly (syntax, duplicate
    keys, with file and line), the merged ``config`` validated, the file system checked."""
    for path in configfiles:
        load_yaml(path)
    exp = parse_experiment(config)
    check_filesystem(exp)
    return exp
