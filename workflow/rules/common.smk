# Config validation and the helpers that turn the experiment into paths, settings and targets.
import json
import os
import re
import shlex
import sys
from pathlib import Path

from elf import plan
from elf.config import ConfigError, to_dict
from elf.hub import pretrained_ref
from elf.validate import validate_workflow_config

# Before anything is written (experiment.json below is the only parse-time write): the config files
# read strictly, every key and cross-field rule, the output roots (elf/validate.py).
try:
    EXP = validate_workflow_config(config, workflow.configfiles)
except ConfigError as err:
    sys.exit(f"Invalid configuration: {err}")

# Every rule runs in the project's pinned environment (the README sets it up once; with
# --use-conda Snakemake builds it from the same file).
ENV = str(Path(workflow.basedir).parent / "environment.yml")
R = EXP.results.rstrip("/")
P = EXP.reports.rstrip("/")
ELF = Path(workflow.basedir).parent / "elf"


def code(*modules):
    """The elf/ source files a stage runs (editing them reruns its jobs and whatever depends on them)."""
    files = [ELF / "__init__.py", ELF / "cli.py", ELF / "config.py", ELF / "device.py", ELF / "io.py"]
    for module in modules:
        path = ELF / module
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [str(f) for f in files]


def as_json(obj):
    return json.dumps(to_dict(obj) if hasattr(obj, "__dataclass_fields__") else obj,
                      sort_keys=True, separators=(",", ":"))


def built_or_name(settings, path):
    """A model built by the DAG (its folder), or a pretrained one: a local folder, else a Hub
    reference (``hub:name@revision``, elf/hub.py)."""
    return path if settings.source == "build" else pretrained_ref(settings.name_or_path, settings.revision)


TOKENIZER = built_or_name(EXP.tokenizer, f"{R}/models/tokenizer")
SCORER = f"{R}/models/scorer"


def encoder_path(name):
    return f"{R}/models/encoder-{name}"


def run_settings(name):
    return EXP.run(name)


def runs_of_kind(kind):
    """A wildcard regex matching the runs of one kind (train / distill / released), so that each
    kind's rule alone can make ``R/runs/{run}/ema.safetensors``."""
    names = [name for name in EXP.runs if EXP.run(name).kind == kind]
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


UPSTREAM_RUNS = set(plan.upstream_runs(EXP))


def train_priority(wildcards):
    """The runs others wait on (distillation teachers, their replicates) train first: the critical path."""
    return 50 if wildcards.run in UPSTREAM_RUNS else 0


# Every run name: keeps R/scores/_dataset/... out of the per-run rules' wildcards.
ANY_RUN = "|".join(re.escape(n) for n in EXP.runs) or "(?!)"


def train_settings_json(name):
    run = EXP.run(name)
    return as_json(dict(run=to_dict(run), dataset=dataset_settings(run.dataset),
                        embedding=to_dict(EXP.embeddings[run.embedding]), sizes=EXP.sizes,
                        precision=EXP.precision))


def task_of(run):
    return EXP.datasets[EXP.run(run).dataset].task


def figure_files(fid):
    fig = EXP.figures[fid]
    if fig.kind == "figure":
        return [f"{P}/figures/{fid}.png", f"{P}/figures/{fid}.csv"]
    return [f"{P}/tables/{fid}.md", f"{P}/tables/{fid}.csv", f"{P}/tables/{fid}.tex"]


def evals_for(fid):
    """The evaluation folders (`evaluate` outputs) holding a figure's aggregates."""
    return plan.eval_dirs_of(f"{R}/evals", EXP, plan.figure_pairs(EXP, fid))


def dataset_scores_for(fid):
    fig = EXP.figures[fid]
    datasets = {EXP.run(run).dataset for run in fig.runs}
    return [f"{R}/scores/_dataset/{d}.json" for d in sorted(datasets)
            if EXP.datasets[d].task == "unconditional"]


def write_if_changed(path, text):
    """Write the resolved experiment for the report stage; unchanged content keeps its mtime so
    nothing downstream reruns."""
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


EXPERIMENT_FILE = write_if_changed(f"{R}/experiment.json", json.dumps(config, indent=1, sort_keys=True))


# ---- input functions of the stage rules (kept here: rule files hold rules only) ----


def tokenizer_input(wildcards=None):
    return [TOKENIZER] if EXP.tokenizer.source == "build" else []


def corpora_input(dataset):
    return [f"{R}/data/corpora"] if EXP.datasets[dataset].source == "embedded" else []


def eval_split(sampler):
    """The split a conditional sampler setting is scored on: its own, else evaluation.split."""
    return EXP.samplers[sampler].split or EXP.evaluation.split


def eval_data_root(run):
    """The folder of a run's embedding stores (its conditional samplers read <split>.zarr there)."""
    settings = run_settings(run)
    return f"{R}/embeddings/{settings.dataset}/{settings.embedding}"


def eval_data_inputs(w):
    """A conditional group's evaluation stores (one per split its samplers use) and token data."""
    run = run_settings(w.run)
    if EXP.datasets[run.dataset].task == "unconditional":
        return {}
    splits = sorted({eval_split(s) for s in plan.group_samplers(EXP, w.run, w.group)})
    return dict(stores=[f"{eval_data_root(w.run)}/{split}.zarr" for split in splits],
                tokens=f"{R}/data/{run.dataset}/tokens")


def scorer_input(w):
    return [SCORER] if task_of(w.run) == "unconditional" else []


def eval_plan_json(run, group):
    """What one `elf evaluate` job does (its --plan): every sampler of the group with its settings,
    seeds and split (elf/plan.py)."""
    ev = EXP.evaluation
    task = task_of(run)
    samplers = {name: dict(settings=to_dict(EXP.samplers[name]), seeds=list(plan.seeds_of(EXP, run, name)),
                           split=eval_split(name) if task != "unconditional" else None)
                for name in plan.group_samplers(EXP, run, group)}
    return as_json(dict(run=run, task=task, n=ev.n_samples if task == "unconditional" else ev.n_examples,
                        batch_size=ev.sample_batch_size, score_batch_size=ev.score_batch_size,
                        precision=EXP.precision, samplers=samplers))


def decoder_store(name):
    """The train-split embedding store a separate decoder learns from."""
    dec = EXP.decoders[name]
    return f"{R}/embeddings/{dec.dataset}/{dec.embedding}/train.zarr"


def decoder_settings_json(name):
    dec = EXP.decoders[name]
    return as_json(dict(decoder=to_dict(dec), dataset=dataset_settings(dec.dataset),
                        embedding=to_dict(EXP.embeddings[dec.embedding])))


def decoder_input(w):
    """The run's separate decoder (Fig. 5b), if it names one."""
    name = run_settings(w.run).decoder
    return [f"{R}/decoders/{name}/model.safetensors"] if name else []


def decoder_arg(w):
    name = run_settings(w.run).decoder
    return f"--decoder {R}/decoders/{name}" if name else ""


def distill_init(run):
    """The run whose EMA weights initialise the student: `init_from`, else the teacher."""
    settings = run_settings(run)
    return settings.init_from or settings.teacher


def report_args():
    """`elf report` arguments of the report rules: every input root (each id reads what it needs)."""
    return (f"--config {EXPERIMENT_FILE} --evals-root {R}/evals "
            f"--dataset-scores-root {R}/scores/_dataset --runs-root {R}/runs "
            f"--trajectories-root {R}/trajectories "
            f"--paper-values config/paper_values.yaml --out {P}")


def ids_of_kind(kind):
    """A wildcard regex matching the figure ids of one kind (figure / table)."""
    ids = [fid for fid, fig in EXP.figures.items() if fig.kind == kind]
    return "|".join(re.escape(i) for i in ids) if ids else "(?!)"


def caption_text(fid):
    """The caption of a figure or table (the report's caption template shows it, from params: a
    caption path cannot depend on a wildcard; so an edited caption re-renders its figure)."""
    path = Path(workflow.basedir, "report", f"{fid}.rst")
    return (path if path.exists() else path.with_name("generic.rst")).read_text().strip()


def plain(text):
    # Snakemake substitutes {name} in report categories and labels as wildcards; no escape exists.
    return text.replace("{", "(").replace("}", ")")


def in_report(path, fmt):
    """Register one rendered file for the HTML report (captioned.rst shows params.caption)."""
    return report(path, caption="../report/captioned.rst",
                  category=lambda w: plain(EXP.figures[w.fid].section),
                  subcategory=lambda w: f"{EXP.figures[w.fid].kind.capitalize()}s",
                  labels=lambda w: {"id": w.fid, "title": plain(EXP.figures[w.fid].title),
                                    "format": fmt})


def rendered(fid):
    """Every file the figure or table rule writes for ``fid`` (provenance sidecar included)."""
    folder = "figures" if EXP.figures[fid].kind == "figure" else "tables"
    return figure_files(fid) + [f"{P}/{folder}/{fid}.json"]


def train_data(w):
    """The cached train store, or (embedding cache: false) the packed tokens and the encoder."""
    run = run_settings(w.run)
    if EXP.embeddings[run.embedding].cache:
        return {"store": f"{R}/embeddings/{run.dataset}/{run.embedding}/train.zarr"}
    encoder = EXP.embeddings[run.embedding].encoder
    inputs = {"tokens": f"{R}/data/{run.dataset}/tokens"}
    if EXP.encoders[encoder].source == "build":
        inputs["encoder"] = encoder_path(encoder)
    return inputs


def train_data_args(w, input):
    if "store" in input.keys():
        return f"--store {input.store}"
    run = run_settings(w.run)
    return f"--tokens {input.tokens} --encoder {embedding_encoder(run.embedding)}"


def embedding_encoder(embedding):
    settings = EXP.embeddings[embedding]
    return built_or_name(EXP.encoders[settings.encoder], encoder_path(settings.encoder))


def released_revision_arg(run):
    revision = run_settings(run).released_revision
    return f"--revision {shlex.quote(revision)}" if revision else ""


def torch_threads(wildcards, threads, resources):
    """CPU threads of a torch job (its OMP_NUM_THREADS): on a cluster its cores (`cpus_per_task`, per
    process under torchrun); locally its Snakemake threads (1: jobs run side by side, one core each)."""
    cpus = resources.get("cpus_per_task")
    if not cpus:
        return threads
    return max(1, int(cpus) // max(1, int(resources.get("gpu", 1))))


def launcher(resources):
    """`elf`, or `torchrun … -m elf` (DDP, one process per GPU) when the job holds several GPUs."""
    gpus = resources.get("gpu", 0)
    return f"torchrun --standalone --nproc_per_node={gpus} -m elf" if gpus > 1 else "elf"


# ---- report: run metadata (config.json, tokens.json) of the configuration tables and token bars ----

def reads_run_metadata(fid):
    """Whether an id reads the runs' metadata (imported here, not at parse time: the report
    package pulls in pandas, and every Slurm job parses this file)."""
    from elf.report.loading import RUN_METADATA_IDS

    return fid in RUN_METADATA_IDS


def run_metadata_for(fid):
    """The checkpoints whose metadata a figure or table reads (T6/T7/T8/F7c/F9b): each run's
    ema.safetensors (its rule's output; config.json sits beside it) and, for distillation rounds,
    tokens.json (an output of the distill rule)."""
    if not reads_run_metadata(fid):
        return []
    runs = EXP.figures[fid].runs
    return [f"{R}/runs/{run}/ema.safetensors" for run in runs] + \
        [f"{R}/runs/{run}/tokens.json" for run in runs if EXP.run(run).kind == "distill"]


def qualitative_inputs(fid):
    """What the qualitative figures show: F8 the first seed's samples and scores of its (run,
    sampler) pairs (their evaluation folders), F18 a trajectory (the `trajectory` rule)."""
    pairs = plan.figure_pairs(EXP, fid)
    if fid == "F8":
        return plan.eval_dirs_of(f"{R}/evals", EXP, pairs)
    if fid == "F18":
        return [f"{R}/trajectories/{run}/{sampler}.json" for run, sampler in pairs[:1]]
    return []


# ---- sharded prepare and embed (data.smk, embed.smk) ----


def dataset_settings(name):
    """A dataset's settings as the stages get them: without `embed_shards`, which only schedules
    embed jobs (the store is the same for any value), so changing it reruns nothing."""
    from elf.stages.prepare import content_settings

    return content_settings(EXP.datasets[name])


def sharded_datasets():
    """A wildcard regex matching the datasets whose train split is embedded by several jobs."""
    names = [name for name, data in EXP.datasets.items() if data.embed_shards > 1]
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def embed_store(w):
    return f"{R}/embeddings/{w.dataset}/{w.embedding}/{w.split}.zarr"


def embed_shard_markers(w):
    """The done markers of the n shard jobs of one sharded store (n = the dataset's embed_shards)."""
    n = EXP.datasets[w.dataset].embed_shards
    return [f"{embed_store(w)}.shards/{k}of{n}.done" for k in range(n)]


def embed_encoder_input(embedding):
    """The encoder folder when the DAG builds it (pretrained encoders load by name)."""
    source = EXP.encoders[EXP.embeddings[embedding].encoder].source
    return [embedding_encoder(embedding)] if source == "build" else []


def embed_device(resources):
    """The job's GPU when it holds one (profile resource `gpu`) and CUDA is visible, else `$ELF_DEVICE`
    when set (xla on a TPU VM: docs/cluster.md), else the CPU."""
    other = os.environ.get("ELF_DEVICE") or "cpu"
    return f"$(nvidia-smi -L > /dev/null 2>&1 && echo cuda || echo {other})" if resources.get("gpu", 0) else other
