# Config validation, the output roots, code() and the report registration; every path, input function
# and setting of the rules is elf/plan.py's (PLAN.<name>, unit-tested in tests/test_plan.py).
import contextlib
import inspect
import json
import os
import shlex
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from elf import deps, plan
from elf.cli import STAGES
from elf.config import ConfigError
from elf.validate import validate_workflow_config

# Before anything is written: every key, range and cross-field rule and the output roots, with a
# message naming the key, the value and what is allowed (elf/validate.py); then the shape against the
# JSON schema generated from the same dataclasses (`elf schema`), as Snakemake workflows declare it.
try:
    EXP = validate_workflow_config(config, workflow.configfiles)
except ConfigError as err:
    sys.exit(f"Invalid configuration: {err}")
validate(config, Path(workflow.basedir) / "schemas" / "config.schema.yaml", set_default=False)


def needs(fid, kind):
    """What a figure or table reads (elf/report/registry.py: a light module, imported when asked)."""
    from elf.report.registry import needs as registry_needs

    return registry_needs(fid, kind)


PLAN = plan.Dag(EXP, needs)
R, P = PLAN.R, PLAN.P
# The jobs run this checkout's elf/ (the files code() derives), installed or not, PYTHONPATH naming
# it. Under --sdm conda their environment (envs/elf.yaml) holds the pinned dependencies only, and `elf`
# is `python -m elf`.
ENV = str(Path(workflow.basedir) / "envs" / "elf.yaml")
ELF = Path(workflow.basedir).parent / "elf"
CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PREFIX = (
    ("set -euo pipefail; " if Path(shell.get_executable() or "sh").name == "bash" else "")  # Snakemake's own
    + f"export PYTHONPATH={shlex.quote(str(ELF.parent))}${{PYTHONPATH:+:$PYTHONPATH}}; "
    + ('elf() { python -m elf "$@"; }; ' if CONDA else "")
)


def code(stage):
    """The digest of the elf/ files `elf <stage>` runs (code_digest in rules/code.smk). Editing one
    of them rewrites the digest, which reruns the jobs of every rule whose stage imports it, and
    whatever depends on their outputs. One input a job, not the ~45 files of the closure: planning
    cost is per input file (issue 26)."""
    return PLAN.code_digest_pattern.format(stage=stage)


def code_files(wildcards):
    """The files of the stage's closure, read from its imports (elf/deps.py)."""
    return [str(path) for path in deps.stage_files(wildcards.stage)]


def cache_signatures(rules):
    """Give each input and param function of ``rules`` its own __signature__ (bound methods: their
    function's), so that Snakemake's per-job inspection reads it instead of rebuilding it."""
    for each in rules:
        for item in (*each.input, *each.params):
            func = getattr(item, "__func__", item)
            if callable(func) and not hasattr(func, "__signature__"):
                with contextlib.suppress(AttributeError, TypeError, ValueError):  # a builtin: left as is
                    func.__signature__ = inspect.signature(func)


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


def embed_device(resources):
    """The job's GPU when it holds one (profile resource `gpu`) and CUDA is visible, else `$ELF_DEVICE`
    when set (xla on a TPU VM: docs/cluster.md), else the CPU."""
    other = os.environ.get("ELF_DEVICE") or "cpu"
    return (
        f"$(nvidia-smi -L > /dev/null 2>&1 && echo cuda || echo {other})"
        if resources.get("gpu", 0)
        else other
    )


def gpu_or_cpu(resources):
    """`cuda` when the job holds a GPU (profile resource `gpu`) and CUDA is visible, else `cpu`:
    the device of a stage that trains on CUDA or the CPU only (the encoder)."""
    return "$(nvidia-smi -L > /dev/null 2>&1 && echo cuda || echo cpu)" if resources.get("gpu", 0) else "cpu"


# ---- Snakemake's HTML report: one category per paper section, a caption per figure ----


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
    return report(
        path,
        caption="../report/captioned.rst",
        category=lambda w: plain(EXP.figures[w.fid].section),
        subcategory=lambda w: f"{EXP.figures[w.fid].kind.capitalize()}s",
        labels=lambda w: {"id": w.fid, "title": plain(EXP.figures[w.fid].title), "format": fmt},
    )
