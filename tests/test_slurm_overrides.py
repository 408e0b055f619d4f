"""docs/cluster.md's recipes for changing what Slurm jobs ask for, checked against
snakemake-executor-plugin-slurm 2.8 without a cluster: each documented command is dry-run with the
profile (on the CI config, one training run and its data), and every planned job's ``sbatch`` call is
rendered by the plugin's own code (``validate_slurm_extra``, ``get_submit_command``,
``set_gres_string``, the executor's account and partition arguments) with the plugin settings that
Snakemake's own parser makes of the command line. Each recipe must add what its comment says and keep
the account, partitions and GPUs; the documented wrong ways must fail as the document says."""

import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_slurm_profile import dry_run_jobs

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cluster.md"
SHAPE = {"ELF_SLURM_ACCOUNT": "proj42", "ELF_SLURM_GPU_PARTITION": "gpuq",
         "ELF_SLURM_CPU_PARTITION": "cpuq"}
RECIPE = re.compile(r"#\s*adds `([^`]+)` to (every job|GPU jobs|train)\s*$")


def documented(marker: str) -> list[str]:
    """The command lines of the fenced block after ``<!-- marker ...`` in docs/cluster.md."""
    text = DOC.read_text()
    start = text.index(f"<!-- {marker}")
    block = text[start:].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def split_command(line: str) -> tuple[dict, list[str], str]:
    """(environment, options between `--profile slurm` and the target, the trailing comment)."""
    command, _, comment = line.partition("  #")
    words = shlex.split(command)
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:3] == ["snakemake", "--profile", "slurm"] and words[-1] == "reports/all", line
    return env, words[3:-1], "#" + comment


def plan(tmp_path: Path, env: dict, options: list[str], profile: str = "slurm") -> list[dict]:
    """The jobs of a dry run with the profile: one training run of the CI config and its inputs."""
    target = f"{tmp_path}/results/runs/base/ema.safetensors"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ELF_SLURM_")}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", profile, "-n", "-p", *options,
         "--configfile", "config/ci.yaml", "--config", f"results={tmp_path}/results",
         f"reports={tmp_path}/reports", "--", target],
        cwd=ROOT, env={**environ, **SHAPE, **env}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [job for job in dry_run_jobs(proc.stdout + proc.stderr) if job["rule"] != "all"]


def plugin_settings(options: list[str]):
    """The plugin's ExecutorSettings as Snakemake makes them from the profile and ``options``."""
    from snakemake.cli import parse_args
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        _, args = parse_args(["--profile", "slurm", "-n", *options])
    finally:
        os.chdir(cwd)
    return ExecutorPluginRegistry().get_plugin("slurm").get_settings(args)


class Resources(dict):
    """A job's resources as the plugin reads them (``.get`` and attributes)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _value(text: str):
    return int(text) if text.isdigit() else text


def sbatch(job: dict, settings, monkeypatch) -> str:
    """The sbatch call the plugin would submit for one dry-run job (its own code throughout)."""
    import snakemake_executor_plugin_slurm as plugin

    monkeypatch.setattr(plugin, "validate_account", lambda account, logger: account)  # no sacctmgr
    resources = Resources({k: _value(v) for k, v in job["resources"].items() if v not in ("", "<TBD>")})
    fake = SimpleNamespace(resources=resources, threads=1, name=job["rule"])
    plugin.validate_slurm_extra(fake)
    executor = SimpleNamespace(logger=logging.getLogger("slurm-test"), _partitions=[],
                               _fallback_partition=None)
    params = {"run_uuid": "uuid", "slurm_logfile": "job.log", "comment_str": f"rule_{job['rule']}",
              "account": next(plugin.Executor.get_account_arg(executor, fake)),
              "partition": plugin.Executor.get_partition_arg(executor, fake), "workdir": str(ROOT)}
    return plugin.get_submit_command(fake, params, settings) + plugin.set_gres_string(fake)


def is_gpu(job: dict) -> bool:
    return int(job["resources"].get("gpu", 0) or 0) > 0


def assert_kept(job: dict, call: str) -> None:
    """The profile's account, partition and GPU request survive the override."""
    assert " -A proj42" in call, (job["rule"], call)
    if is_gpu(job):
        assert " -p gpuq" in call and f" --gpus={job['resources']['gpu']}" in call, (job["rule"], call)
    else:
        assert " -p cpuq" in call and "--gpus" not in call, (job["rule"], call)


RECIPES = documented("slurm-overrides")


@pytest.mark.parametrize("line", RECIPES, ids=[f"recipe{k}" for k in range(len(RECIPES))])
def test_each_documented_override_reaches_sbatch_and_keeps_the_profile(line, tmp_path, monkeypatch):
    env, options, comment = split_command(line)
    flag, where = RECIPE.search(comment).groups()
    jobs = plan(tmp_path, env, options)
    settings = plugin_settings(options)
    rules = {job["rule"] for job in jobs}
    assert {"train", "prepare", "embed"} <= rules
    for job in jobs:
        call = sbatch(job, settings, monkeypatch)
        assert_kept(job, call)
        wanted = where == "every job" or (where == "GPU jobs" and is_gpu(job)) or job["rule"] == where
        assert (flag in call) == wanted, (line, job["rule"], call)


def test_the_documented_profile_copy_changes_one_rule_and_keeps_the_rest(tmp_path, monkeypatch):
    """`cp -r slurm slurm-mine`, then train's `runtime: 2880` and `qos: long` in its set-resources."""
    assert "cp -r slurm slurm-mine" in DOC.read_text()
    mine = tmp_path / "slurm-mine"
    shutil.copytree(ROOT / "slurm", mine)
    lines = (mine / "config.yaml").read_text().split("\n")
    train = next(k for k, line in enumerate(lines) if line.startswith("  train:"))
    runtime = next(k for k in range(train, len(lines)) if lines[k].strip().startswith("runtime:"))
    lines[runtime:runtime + 1] = ["    runtime: 2880", "    qos: long"]
    (mine / "config.yaml").write_text("\n".join(lines))
    jobs = plan(tmp_path, {}, [], profile=str(mine))
    settings = plugin_settings([])
    for job in jobs:
        call = sbatch(job, settings, monkeypatch)
        assert_kept(job, call)
        assert (" -t 2880" in call and "--qos=long" in call) == (job["rule"] == "train"), call


def test_the_documented_wrong_ways_fail_as_stated(tmp_path, monkeypatch):
    from snakemake_interface_common.exceptions import WorkflowError

    refused, dropping = documented("slurm-overrides-refused")
    env, options, comment = split_command(refused)
    assert "refused" in comment
    jobs = plan(tmp_path, env, options)
    with pytest.raises(WorkflowError, match="quality-of-service option is not allowed in the 'slurm_extra'"):
        sbatch(jobs[0], plugin_settings(options), monkeypatch)

    env, options, comment = split_command(dropping)
    assert "drops every rule's GPUs, GPU partition, cores and memory" in comment
    train = next(job for job in plan(tmp_path / "b", env, options) if job["rule"] == "train")
    assert train["resources"]["runtime"] == "2880" and "gpu" not in train["resources"]
    assert train["resources"]["slurm_partition"] == "cpuq"          # the default's, not the GPU one
    assert train["resources"]["cpus_per_task"] == "1" and train["resources"]["mem_mb"] == "4000"
