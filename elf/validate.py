"""Plan-time validation: everything ``snakemake -n`` refuses before any rule runs.

``elf.config`` holds the types and checks each key's type and range; this module owns every rule
that needs more than one key:
- ``parse_experiment(dict)``: a loaded config as an ``Experiment``, every reference between its
  sections resolved (datasets, decoders, runs, figures, trends), then ``check_rules``;
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

from elf.config import ConfigError, DatasetSettings, Experiment, RunSettings, from_dict
from elf.settings_checks import (check_heads, check_run, check_sampler, check_sampler_for_run,
                                 check_seeds, check_sizes)

# Names become path components, wildcard values and unquoted shell words.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
NAME_RULE = "letters, digits and _ . + - (starting with a letter or digit)"
NAME_MAX = 100  # file systems allow 255 bytes a name; the workflow adds prefixes and suffixes
# Output roots are pasted unquoted into every rule's shell command.
PATH = re.compile(r"^[A-Za-z0-9_.+/-]+$")
PATH_RULE = "a non-empty path of letters, digits and _ . + - / (no spaces, quotes, ~ or $)"
# Hugging Face repo ids: one optional owner, segments of word characters, '.' and '-'.
HUB_ID = re.compile(r"^(?!.*(--|\.\.))[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
NAMED_TABLES = ("encoders", "datasets", "embeddings", "decoders", "sizes", "runs", "samplers",
                "figures")
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
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror or err})") from err
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
                          f"{err.start}); allowed: a UTF-8 encoded config file") from err
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        lines = text.splitlines()
        tab = mark is not None and mark.line < len(lines) and "\t" in lines[mark.line]
        hint = " (a tab indents this line: YAML indents with spaces only)" if tab else ""
        raise ConfigError(f"{where}: invalid YAML: {err.problem or err.context}{hint}") from err
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

def parse_experiment(data: dict) -> Experiment:
    """Validate a whole config mapping; every run is resolved once so that a bad run fails now,
    then the cross-field rules of ``elf.validate`` (names, sizes, pairings, distillation chains)."""
    exp = from_dict(Experiment, data)
    for name, dataset in exp.datasets.items():
        _check_dataset(name, dataset)
    _check_decoder_refs(exp)
    for name in exp.runs:
        run = exp.run(name)
        _check_refs(exp, name, run)
    for name, fig in exp.figures.items():
        for ref, table, what in [(r, exp.runs, "runs") for r in fig.runs] + \
                [(s, exp.samplers, "samplers") for s in fig.samplers]:
            if ref not in table:
                raise ConfigError(f"config key 'figures.{name}.{what}': '{ref}' is not defined "
                                  f"under '{what}' (defined: {', '.join(table)})")
        for pair in fig.pairs:
            if pair.run not in fig.runs or pair.sampler not in fig.samplers:
                raise ConfigError(f"config key 'figures.{name}.pairs': {pair.run}/{pair.sampler} is not "
                                  f"one of its runs × samplers")
    for name, trend in exp.trends.items():
        for side in ("lower", "higher"):
            pair = getattr(trend, side)
            for ref, table, what in ((pair.run, exp.runs, "run"), (pair.sampler, exp.samplers, "sampler")):
                if ref not in table:
                    raise ConfigError(f"config key 'trends.{name}.{side}.{what}': '{ref}' is not "
                                      f"defined under '{what}s' (defined: {', '.join(table)})")
    check_rules(exp)
    return exp


def _check_dataset(name: str, ds: DatasetSettings) -> None:
    """A conditional layout leaves room for its target, of the stated length (spec §2: the sampler
    keeps max_length - max_input_length tokens); only authors' datasets take a raw test split."""
    key = f"datasets.{name}"
    if ds.task != "unconditional":
        if ds.max_input_length is None or ds.max_input_length >= ds.max_length:
            raise ConfigError(f"config key '{key}.max_input_length': got {ds.max_input_length!r}; a "
                              f"{ds.task} dataset needs a source cap below max_length {ds.max_length}")
        if ds.target_length is not None and ds.target_length != ds.target_tokens:
            raise ConfigError(f"config key '{key}.target_length': got {ds.target_length}, but "
                              f"max_length {ds.max_length} - max_input_length {ds.max_input_length} "
                              f"leaves {ds.target_tokens} target tokens; fix the layout or the length")
    elif ds.target_length is not None:
        raise ConfigError(f"config key '{key}.target_length': got {ds.target_length}; only "
                          "conditional datasets have a target")
    elif ds.pad_source:
        raise ConfigError(f"config key '{key}.pad_source': true on an unconditional dataset; only "
                          "conditional datasets have a source")
    if ds.test is not None and ds.source != "authors":
        raise ConfigError(f"config key '{key}.test': a raw test split is for source 'authors' "
                          f"(got source {ds.source!r})")


def _check_refs(exp: Experiment, name: str, run: RunSettings) -> None:
    refs = [("dataset", run.dataset, exp.datasets), ("embedding", run.embedding, exp.embeddings)]
    refs += [(k, getattr(run, k), exp.runs) for k in ("teacher", "init_from") if getattr(run, k)]
    for key, ref, table in refs:
        if ref not in table:
            raise ConfigError(f"config key 'runs.{name}.{key}': '{ref}' is not defined "
                              f"(defined: {', '.join(table)})")
    if run.decoder is not None:
        _check_decoder(exp, name, run)


def _check_decoder(exp: Experiment, name: str, run: RunSettings) -> None:
    """A run decoded by a separate decoder uses the decoder's embedding (its decode head and decode
    branch: ``elf.settings_checks.check_run``)."""
    if run.decoder not in exp.decoders:
        raise ConfigError(f"config key 'runs.{name}.decoder': '{run.decoder}' is not defined under "
                          f"'decoders' (defined: {', '.join(exp.decoders) or 'none'})")
    dec = exp.decoders[run.decoder]
    if dec.embedding != run.embedding:
        raise ConfigError(f"config key 'runs.{name}.decoder': decoder '{run.decoder}' is trained on "
                          f"embedding '{dec.embedding}' but the run uses '{run.embedding}'")


def _check_decoder_refs(exp: Experiment) -> None:
    for name, dec in exp.decoders.items():
        for key, ref, table in (("dataset", dec.dataset, exp.datasets),
                                ("embedding", dec.embedding, exp.embeddings)):
            if ref not in table:
                raise ConfigError(f"config key 'decoders.{name}.{key}': '{ref}' is not defined "
                                  f"(defined: {', '.join(table)})")


def check_rules(exp: Experiment) -> None:
    """Every rule that needs more than one key; see the module docstring."""
    _check_names(exp)
    check_sizes(exp.sizes)
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
    _check_round_order(runs)
    _check_replicates(exp, runs)
    check_seeds(exp.evaluation.seeds)
    for name, sampler in exp.samplers.items():
        check_sampler(f"samplers.{name}", sampler)
    for sampler in exp.evaluation.replicate_samplers:
        if sampler not in exp.samplers:
            raise ConfigError(f"config key 'evaluation.replicate_samplers': '{sampler}' is not defined "
                              f"under 'samplers'; defined: {', '.join(exp.samplers)}")
    for fid in exp.figures:
        _check_figure(exp, fid, runs)
    for name, trend in exp.trends.items():
        for side in ("lower", "higher"):
            pair = getattr(trend, side)
            check_sampler_for_run(f"samplers.{pair.sampler}", exp.samplers[pair.sampler],
                                  runs[pair.run].objective, exp.datasets[runs[pair.run].dataset].task,
                                  f"trend {name} samples run '{pair.run}'", input_cfg=False)


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
            if len(name) > NAME_MAX:
                raise ConfigError(f"config key '{table}': the name {name[:24]!r}… has {len(name)} "
                                  f"characters, too long for the file names made of it (with "
                                  f"suffixes such as .jsonl.partial); allowed: at most {NAME_MAX}")


def check_models(exp: Experiment) -> None:
    """What the workflow needs to build or load the models: an embedding names a defined encoder, a
    built encoder learns from a defined dataset (``validate_workflow_config``; a config read only to
    report on finished runs need not define them)."""
    for name, emb in exp.embeddings.items():
        if emb.encoder not in exp.encoders:
            raise ConfigError(f"config key 'embeddings.{name}.encoder': '{emb.encoder}' is not defined "
                              f"under 'encoders' (defined: {', '.join(exp.encoders) or 'none'})")
    for name, enc in exp.encoders.items():
        if enc.source == "build" and enc.dataset not in exp.datasets:
            raise ConfigError(f"config key 'encoders.{name}.dataset': '{enc.dataset}' is not defined "
                              f"under 'datasets' (defined: {', '.join(exp.datasets)}); a built encoder "
                              "learns from that dataset's packed train split: name one")


def _check_widths(exp: Experiment) -> None:
    for name, enc in exp.encoders.items():
        if enc.source == "build":
            check_heads(f"encoders.{name}", enc.d_model, enc.heads, rope=False, width_key="d_model")
    if exp.scorer.source == "build":
        check_heads("scorer", exp.scorer.width, exp.scorer.heads, rope=False)
    for name, dec in exp.decoders.items():
        check_heads(f"decoders.{name}", dec.width, dec.heads, rope=True)


def _check_run(exp: Experiment, name: str, run: RunSettings) -> None:
    check_run(f"runs.{name}", run, exp.datasets[run.dataset], exp.embeddings[run.embedding], exp.sizes,
              dataset_name=run.dataset, embedding_name=run.embedding)
    data = exp.datasets[run.dataset]
    pairs = exp.corpora.train_docs  # a generated conditional split packs one row per pair at most
    if data.source == "embedded" and data.task != "unconditional" and run.kind != "released" and \
            run.budget.batch_size > pairs:
        raise ConfigError(f"config key 'runs.{name}.budget.batch_size': got {run.budget.batch_size}, more "
                          f"than the {pairs} training pairs of the generated dataset '{run.dataset}' "
                          f"(corpora.train_docs); allowed: at most {pairs}")
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


def _check_round_order(runs: dict[str, RunSettings]) -> None:
    """Progressive distillation halves the student's steps each round (spec §7): a round starts from
    a round of at least as many steps, never from a later one."""
    for name, run in runs.items():
        init = runs.get(run.init_from) if run.init_from else None
        if run.kind == "distill" and init is not None and init.kind == "distill" and run.distill \
                and init.distill and init.distill.student_steps < run.distill.student_steps:
            raise ConfigError(
                f"config key 'runs.{name}.init_from': got '{run.init_from}', a round of "
                f"{init.distill.student_steps} student steps, but '{name}' distills to "
                f"{run.distill.student_steps}; allowed: an init round of at least as many student "
                "steps (rounds reduce them: the chain runs in order)")


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
            check_sampler_for_run(f"samplers.{sampler}", s, runs[run].objective, tasks[run],
                                  f"figure {fid} samples run '{run}'", input_cfg=False)


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
    check_models(exp)
    check_filesystem(exp)
    return exp
