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

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Callable

from elf.artifacts import layout
from elf.artifacts.names import DECODER_WEIGHTS
from elf.config import Experiment, content_settings, to_dict
from elf.hub import pretrained_ref
from elf.pairs import Needs, figure_pairs, review_pairs, run_samplers, seeds_of, upstream_runs
from elf.plan_index import plan_index as _index
from elf.wildcards import alternatives as _alternatives
from elf.wildcards import not_one_of

ALL_SAMPLERS = "all"  # the group name of a run's single evaluation job under group_by: run


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
    return layout.eval_dir(evals_root, run, group)


def pair_dir(evals_root, exp: Experiment, run: str, sampler: str) -> Path:
    """The evaluation folder holding (run, sampler)'s outputs."""
    return eval_dir(evals_root, run, eval_group(exp, run, sampler))


def samples_file(evals_root, exp: Experiment, run: str, sampler: str, seed: int) -> Path:
    return layout.samples_path(pair_dir(evals_root, exp, run, sampler), sampler, seed)


def scores_file(evals_root, exp: Experiment, run: str, sampler: str, seed: int) -> Path:
    return layout.scores_path(pair_dir(evals_root, exp, run, sampler), sampler, seed)


def aggregate_path(evals_root, exp: Experiment, run: str, sampler: str) -> Path:
    return layout.aggregate_file(pair_dir(evals_root, exp, run, sampler), sampler)


def eval_dirs_of(evals_root, exp: Experiment, pairs) -> list[str]:
    """The evaluation folders that hold ``pairs`` of (run, sampler), each once, in order."""
    return list({str(pair_dir(evals_root, exp, run, sampler)): None for run, sampler in pairs})


def effective_sampler(settings: dict, task: str) -> dict:
    """A sampler's settings as they take effect on a run of ``task``: an unconditional run has no
    source, so input CFG is 1 there (``elf sample`` refuses another value on such a run), and it has
    no examples to cut (``n_examples`` 0)."""
    return {**settings, "input_cfg": 1.0, "n_examples": 0} if task == "unconditional" else settings


# ---- the config slice of one figure or table ----

def referenced_runs(exp: Experiment, runs) -> list[str]:
    """``runs`` and every run they name (teacher, init_from, replicate_of), transitively, in config
    order: what a run's settings are checked against."""
    seen: set[str] = set()
    todo = list(runs)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        run = exp.run(name)
        todo += [ref for ref in (run.teacher, run.init_from, run.replicate_of) if ref]
    order = _index(exp).run_order
    return sorted(seen, key=order.__getitem__)


def figure_config(config: dict, exp: Experiment, figure_id: str) -> dict:
    """The part of the config one figure or table reads: every shared section, but of ``runs``,
    ``samplers`` and ``figures`` only its own (and the runs they name), and no trend checks. The
    workflow hands it to the figure's job, so editing another run, sampler or figure re-renders
    nothing here."""
    fig = exp.figures[figure_id]
    per_id = {"runs": referenced_runs(exp, fig.runs), "samplers": list(fig.samplers),
              "figures": [figure_id]}
    part = {key: value for key, value in config.items() if key not in (*per_id, "trends")}
    for key, names in per_id.items():
        part[key] = {name: config[key][name] for name in names}
    if "evaluation" in part:   # which samplers replicates run is the evaluation's business, not a figure's
        part["evaluation"] = {k: v for k, v in part["evaluation"].items() if k != "replicate_samplers"}
    return part


# ---- the workflow's paths and input functions (workflow/rules/*.smk call them as DAG.<name>) ----

def _as_json(obj) -> str:
    return json.dumps(to_dict(obj) if dataclasses.is_dataclass(obj) else obj, sort_keys=True,
                      separators=(",", ":"))


class Dag:
    """Where every file of one experiment lives under its roots, and what each rule's job reads: the
    input functions, settings and arguments of the rules, derived from the config alone.

    ``needs(figure_id, kind)`` says what a figure or table reads (``elf.report.registry.needs``;
    passed in, so this module stays below the report)."""

    def __init__(self, exp: Experiment, needs: Callable[[str, str], Needs] = lambda fid, kind: Needs()):
        self.exp = exp
        self._needs = needs
        self.R = exp.results.rstrip("/")
        self.P = exp.reports.rstrip("/")
        # Every rule's output, a pattern over the rule's wildcards composed from the layout: the rules
        # declare these and the input functions below format them, one spelling per artifact
        # (tests/test_workflow.py checks every job's outputs against ``output_patterns``).
        R, P = self.R, self.P
        self.corpora_dir = f"{R}/data/corpora"
        self.tokenizer_dir = f"{R}/models/tokenizer"
        self.encoder_pattern = f"{R}/models/encoder-{{encoder}}"
        self.scorer = f"{R}/models/scorer"
        self.tokens_pattern = layout.tokens_dir(R, "{dataset}")
        self.store_pattern = layout.store_path(R, "{dataset}", "{embedding}", "{split}")
        self.shard_marker_pattern = f"{self.store_pattern}.shards/{{k}}of{{n}}.done"
        self.decoder_dir_pattern = f"{R}/decoders/{{name}}"
        self.decoder_pattern = f"{self.decoder_dir_pattern}/{DECODER_WEIGHTS}"
        self.run_dir_pattern = str(layout.run_dir(layout.runs_root(R), "{run}"))
        self.run_weights_pattern = str(layout.run_weights(layout.runs_root(R), "{run}"))
        self.run_tokens_pattern = str(layout.run_tokens_file(layout.runs_root(R), "{run}"))
        self.eval_dir_pattern = str(layout.eval_dir(layout.evals_root(R), "{run}", "{group}"))
        self.trajectories_root = f"{R}/trajectories"
        self.trajectory_pattern = str(layout.trajectory_path(self.trajectories_root, "{run}", "{sampler}"))
        self.dataset_scores_root = f"{R}/scores/_dataset"
        self.dataset_scores_pattern = str(layout.dataset_scores_path(self.dataset_scores_root, "{dataset}"))
        self.code_digest_pattern = f"{R}/code/{{stage}}.sha256"  # elf/deps.py digest_text
        self.experiment_file = f"{R}/experiment.json"
        self.review_evals_file = f"{R}/review_evals.txt"  # `elf report --evals-from`
        self.review_md, self.review_html = map(str, layout.review_paths(P))
        self.trends_file = f"{P}/{layout.TRENDS_FILE}"
        self.manifest_file = f"{P}/{layout.MANIFEST}"
        self.tokenizer = self.built_or_name(exp.tokenizer, self.tokenizer_dir)
        self.upstream = set(upstream_runs(exp))
        self.any_run = r"[^/]+"  # one path component (a run's name; an unknown one fails in the plan)
        self._costs: dict[str, float] | None = None
        self._max_cost = 1.0
        self._dicts: dict[tuple[str, str], dict] = {}

    as_json = staticmethod(_as_json)

    def rendered_pattern(self, kind: str, suffix: str) -> str:
        """One file of the figure or table rule (``{fid}``): a rendered file or the sidecar."""
        return str(layout.kind_dir(self.P, kind) / f"{{fid}}{suffix}")

    def output_patterns(self) -> list[str]:
        """Every pattern a rule's output is declared with."""
        rendered = [self.rendered_pattern(kind, suffix) for kind, suffixes in layout.RENDERED_SUFFIXES.items()
                    for suffix in (*suffixes, layout.SIDECAR_SUFFIX)]
        return [self.code_digest_pattern, self.corpora_dir, self.tokenizer_dir, self.encoder_pattern,
                self.scorer, self.tokens_pattern, self.store_pattern, self.shard_marker_pattern,
                self.decoder_pattern, self.run_weights_pattern, self.run_tokens_pattern, self.eval_dir_pattern,
                self.trajectory_pattern, self.dataset_scores_pattern, self.experiment_file,
                self.review_evals_file, self.review_md, self.review_html, self.trends_file,
                self.manifest_file, *rendered]

    @staticmethod
    def built_or_name(settings, path: str) -> str:
        """A model built by the DAG (its folder), or a pretrained one: a local folder, else a Hub
        reference (``hub:name@revision``, elf/hub.py)."""
        return path if settings.source == "build" else pretrained_ref(settings.name_or_path, settings.revision)

    # ---- models and data ----

    def encoder_path(self, name: str) -> str:
        return self.encoder_pattern.format(encoder=name)

    def encoder_tokens(self, w) -> str:
        """The packed tokens a built encoder learns from (its `dataset`)."""
        return layout.tokens_dir(self.R, self.exp.encoders[w.encoder].dataset)

    def embedding_encoder(self, embedding: str) -> str:
        settings = self.exp.embeddings[embedding]
        return self.built_or_name(self.exp.encoders[settings.encoder], self.encoder_path(settings.encoder))

    def tokenizer_input(self, wildcards=None) -> list[str]:
        """The tokenizer folder when the DAG builds it (an input function, not a list: with the
        tokenizer also a param, Snakemake's linter takes a literal input for a hard-coded prefix)."""
        return [self.tokenizer] if self.exp.tokenizer.source == "build" else []

    def corpora_input(self, dataset: str) -> list[str]:
        return [self.corpora_dir] if self.exp.datasets[dataset].source == "embedded" else []

    def dataset_settings(self, name: str) -> dict:
        """A dataset's settings as the stages get them (without scheduling-only fields such as
        ``embed_shards``: changing one reruns nothing)."""
        if ("datasets", name) not in self._dicts:
            self._dicts["datasets", name] = content_settings(self.exp.datasets[name])
        return self._dicts["datasets", name]

    def section_dict(self, section: str, name: str) -> dict:
        """``to_dict`` of one named entry of a config table (``embeddings``, ``samplers``), made
        once: every run's job settings repeat them."""
        if (section, name) not in self._dicts:
            self._dicts[section, name] = to_dict(getattr(self.exp, section)[name])
        return self._dicts[section, name]

    def sharded_datasets(self) -> str:
        """A wildcard regex matching the datasets whose train split is embedded by several jobs."""
        return _alternatives(n for n, data in self.exp.datasets.items() if data.embed_shards > 1)

    def embed_store(self, w) -> str:
        return layout.store_path(self.R, w.dataset, w.embedding, w.split)

    def embed_shard_markers(self, w) -> list[str]:
        """The done markers of the n shard jobs of one sharded store (n = the dataset's embed_shards)."""
        n = self.exp.datasets[w.dataset].embed_shards
        return [self.shard_marker_pattern.format(dataset=w.dataset, embedding=w.embedding, split=w.split,
                                                 k=k, n=n) for k in range(n)]

    def embed_encoder_input(self, embedding: str) -> list[str]:
        """The encoder folder when the DAG builds it (pretrained encoders load by name)."""
        source = self.exp.encoders[self.exp.embeddings[embedding].encoder].source
        return [self.embedding_encoder(embedding)] if source == "build" else []

    # ---- runs ----

    def runs_of_kind(self, kind: str) -> str:
        """A wildcard regex matching the runs of one kind (train / distill / released), so that each
        kind's rule alone makes ``R/runs/{run}/ema.safetensors``: distillation and released runs by
        name, training runs as every name but theirs (elf/wildcards.py: a short constraint)."""
        if kind == "train":
            return not_one_of(n for n in self.exp.runs if self.exp.run(n).kind != "train")
        return _alternatives(n for n in self.exp.runs if self.exp.run(n).kind == kind)

    def train_priority(self, wildcards) -> int:
        """The runs others wait on (distillation teachers, their replicates) train first (50); the
        others longest first (1-40 by ``train_cost``), so no long run is left to finish alone."""
        if wildcards.run in self.upstream:
            return 50
        if self._costs is None:  # once: every training job asks
            self._costs = {n: self.train_cost(n) for n in self.exp.runs
                           if self.exp.run(n).kind == "train" and n not in self.upstream}
            self._max_cost = max(self._costs.values(), default=1)
        return 1 + round(39 * self._costs.get(wildcards.run, 0) / self._max_cost)

    def data_priority(self, wildcards) -> int:
        """A dataset's packed tokens and embedding stores take the highest priority of the runs that
        train on them (on that embedding, where the job has one): Snakemake does not pass a job's
        priority on to the jobs it waits for, so the data of the longest runs would otherwise wait
        behind every ready training job and those runs finish alone."""
        from types import SimpleNamespace

        embedding = getattr(wildcards, "embedding", None)
        readers = [name for name in self.exp.runs
                   if (run := self.exp.run(name)).kind == "train" and run.dataset == wildcards.dataset
                   and embedding in (None, run.embedding)]
        return max((self.train_priority(SimpleNamespace(run=name)) for name in readers), default=0)

    def train_cost(self, name: str) -> float:
        """A run's training work, up to a constant: steps × tokens per batch × depth × width² (the
        built-in ELF sizes count as one: their order comes from steps and tokens alone)."""
        run = self.exp.run(name)
        shape = self.exp.sizes.get(run.model.size)
        per_token = shape["depth"] * shape["width"] ** 2 if shape else 1
        length = self.exp.datasets[run.dataset].max_length
        return run.budget.steps * run.budget.batch_size * length * per_token

    def train_settings_json(self, name: str) -> str:
        run = self.exp.run(name)
        return _as_json(dict(run=to_dict(run), dataset=self.dataset_settings(run.dataset),
                             embedding=self.section_dict("embeddings", run.embedding),
                             sizes=self.exp.sizes, precision=self.exp.precision))

    def train_data(self, w) -> dict[str, str]:
        """The cached train store, or (embedding cache: false) the packed tokens and the encoder."""
        run = self.exp.run(w.run)
        embedding = self.exp.embeddings[run.embedding]
        if embedding.cache:
            return {"store": layout.store_path(self.R, run.dataset, run.embedding, "train")}
        inputs = {"tokens": layout.tokens_dir(self.R, run.dataset)}
        if self.exp.encoders[embedding.encoder].source == "build":
            inputs["encoder"] = self.encoder_path(embedding.encoder)
        return inputs

    def train_data_args(self, w, input) -> str:
        if "store" in input.keys():
            return f"--store {input.store}"
        return f"--tokens {input.tokens} --encoder {self.embedding_encoder(self.exp.run(w.run).embedding)}"

    def run_dir(self, run: str) -> str:
        return str(layout.run_dir(layout.runs_root(self.R), run))

    def distill_inputs(self, w) -> dict[str, str]:
        """A round's train store, its teacher's EMA weights and those of the run that initialises the
        student (`init_from`, else the teacher)."""
        run = self.exp.run(w.run)
        return dict(store=layout.store_path(self.R, run.dataset, run.embedding, "train"),
                    teacher=self.run_weights_pattern.format(run=run.teacher),
                    init=self.run_weights_pattern.format(run=run.init_from or run.teacher))

    def released_source(self, w) -> list[str]:
        """A released run's local checkpoint file or folder (a Hub id is fetched, not an input)."""
        return [f for f in [self.exp.run(w.run).released] if Path(f).exists()]

    def released_revision_arg(self, run: str) -> str:
        revision = self.exp.run(run).released_revision
        return f"--revision {shlex.quote(revision)}" if revision else ""

    # ---- separate decoders ----

    def decoder_store(self, name: str) -> str:
        """The train-split embedding store a separate decoder learns from."""
        dec = self.exp.decoders[name]
        return layout.store_path(self.R, dec.dataset, dec.embedding, "train")

    def decoder_settings_json(self, name: str) -> str:
        dec = self.exp.decoders[name]
        return _as_json(dict(decoder=to_dict(dec), dataset=self.dataset_settings(dec.dataset),
                             embedding=to_dict(self.exp.embeddings[dec.embedding])))

    # ---- evaluation ----

    def task_of(self, run: str) -> str:
        return self.exp.datasets[self.exp.run(run).dataset].task

    def eval_split(self, sampler: str) -> str:
        """The split a conditional sampler setting is scored on: its own, else evaluation.split."""
        return self.exp.samplers[sampler].split or self.exp.evaluation.split

    def eval_data_root(self, run: str) -> str:
        """The folder of a run's embedding stores (its conditional samplers read <split>.zarr there)."""
        settings = self.exp.run(run)
        return layout.stores_dir(self.R, settings.dataset, settings.embedding)

    def eval_inputs(self, w) -> dict:
        """What one evaluation job reads besides the checkpoint and the tokenizer: a conditional
        group's evaluation stores (one per split its samplers use) and token data, an unconditional
        run's scorer, and the run's separate decoder (Fig. 5b) if it names one. One input function
        for the rule: Snakemake's planning costs per function and per file (issue 26)."""
        run = self.exp.run(w.run)
        inputs: dict = {}
        if self.task_of(w.run) == "unconditional":
            inputs["scorer"] = self.scorer
        else:
            splits = sorted({self.eval_split(s) for s in group_samplers(self.exp, w.run, w.group)})
            inputs["stores"] = [layout.store_path(self.R, run.dataset, run.embedding, split) for split in splits]
            inputs["tokens"] = layout.tokens_dir(self.R, run.dataset)
        if run.decoder:
            inputs["decoder"] = self.decoder_pattern.format(name=run.decoder)
        return inputs

    def eval_input_args(self, w, input) -> str:
        """``elf evaluate``'s options for ``eval_inputs``: --scorer, or --eval-data and --tokens;
        --decoder (its folder)."""
        args = []
        if "scorer" in input.keys():
            args.append(f"--scorer {input.scorer}")
        if "tokens" in input.keys():
            args.append(f"--eval-data {self.eval_data_root(w.run)} --tokens {input.tokens}")
        if "decoder" in input.keys():
            args.append(f"--decoder {Path(input.decoder).parent}")
        return " ".join(args)

    def eval_plan_json(self, run: str, group: str) -> str:
        """What one `elf evaluate` job does (its --plan): every sampler of the group with its
        settings, seeds and split."""
        ev, task = self.exp.evaluation, self.task_of(run)
        samplers = {name: dict(settings=effective_sampler(self.section_dict("samplers", name), task),
                               seeds=list(seeds_of(self.exp, run, name)),
                               split=self.eval_split(name) if task != "unconditional" else None,
                               n=self.exp.samplers[name].n_examples or ev.n_examples)
                    for name in group_samplers(self.exp, run, group)}
        if task == "unconditional":
            for entry in samplers.values():
                entry.pop("n")
        return _as_json(dict(run=run, task=task, n=ev.n_samples if task == "unconditional" else ev.n_examples,
                             batch_size=ev.sample_batch_size, score_batch_size=ev.score_batch_size,
                             precision=self.exp.precision, samplers=samplers))

    def eval_dirs(self, pairs) -> list[str]:
        return eval_dirs_of(layout.evals_root(self.R), self.exp, pairs)

    # ---- figures, tables, the review ----

    def needs(self, fid: str) -> Needs:
        return self._needs(fid, self.exp.figures[fid].kind)

    def ids_of_kind(self, kind: str) -> str:
        """A wildcard regex matching the figure ids of one kind (figure / table)."""
        return _alternatives(fid for fid, fig in self.exp.figures.items() if fig.kind == kind)

    def figure_files(self, fid: str) -> list[str]:
        """Every file the figure or table rule writes for ``fid`` (provenance sidecar included)."""
        kind = self.exp.figures[fid].kind
        suffixes = (*layout.RENDERED_SUFFIXES[kind], layout.SIDECAR_SUFFIX)
        return [self.rendered_pattern(kind, suffix).format(fid=fid) for suffix in suffixes]

    def evals_for(self, fid: str) -> list[str]:
        """The evaluation folders holding a figure's aggregates (and the samples it shows): its job's
        ``elf report --evals``."""
        needs = self.needs(fid)
        return self.eval_dirs(figure_pairs(self.exp, fid)) if needs.aggregates or needs.samples else []

    def dataset_scores_for(self, fid: str) -> list[str]:
        """The "Dataset" line's reference scores, of each unconditional dataset of its runs."""
        if not self.needs(fid).dataset_line:
            return []
        datasets = {self.exp.run(run).dataset for run in self.exp.figures[fid].runs}
        return [self.dataset_scores_pattern.format(dataset=d) for d in sorted(datasets)
                if self.exp.datasets[d].task == "unconditional"]

    def run_metadata_for(self, fid: str) -> list[str]:
        """The checkpoints whose metadata a figure or table reads: each run's ema.safetensors (its
        rule's output; config.json sits beside it), and tokens.json of distillation rounds."""
        if not self.needs(fid).run_metadata:
            return []
        runs = self.exp.figures[fid].runs
        return [self.run_weights_pattern.format(run=run) for run in runs] + \
            [self.run_tokens_pattern.format(run=run) for run in runs if self.exp.run(run).kind == "distill"]

    def shown_for(self, fid: str) -> list[str]:
        """The trajectory a qualitative figure shows: that of its first pair (the `trajectory` rule).
        The samples a figure shows lie in its evaluation folders (``evals_for``)."""
        if not self.needs(fid).trajectory:
            return []
        run, sampler = figure_pairs(self.exp, fid)[0]
        return [self.trajectory_pattern.format(run=run, sampler=sampler)]

    def figure_settings_json(self, config: dict, fid: str) -> str:
        """A figure's slice of the config (``figure_config``), for its job's --settings."""
        return _as_json(figure_config(config, self.exp, fid))

    def report_args(self) -> str:
        """`elf report` arguments: the input roots besides the evaluation folders, which each rule
        passes from its inputs (``--evals``, ``--evals-from``)."""
        return (f"--dataset-scores-root {self.dataset_scores_root} "
                f"--runs-root {layout.runs_root(self.R)} --trajectories-root {self.trajectories_root} "
                f"--paper-values config/paper_values.yaml --out {self.P}")

    def review_evals(self) -> list[str]:
        """The evaluation folders the review reads: those of its pairs (``elf.pairs.review_pairs``)."""
        return self.eval_dirs(review_pairs(self.exp))

    def review_inputs(self) -> list[str]:
        """What the review reads besides the experiment and its evaluation folders: the run metadata
        and every rendered figure and table."""
        exp = self.exp
        return [*(f for fid in exp.figures for f in self.run_metadata_for(fid)),
                *(f for fid in exp.figures for f in self.figure_files(fid))]
