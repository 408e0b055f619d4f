"""The TPU VM profile (tpu/config.yaml), dry: `ELF_DEVICE=xla snakemake --profile tpu -n` on the CI
config. Every rule that may run on XLA holds the one `tpu` resource (one XLA job at a time), training
is a plain `elf train` (it starts its own replicas), and embed jobs get `--device xla`. The stages on
the XLA device are tested in tests/test_xla_*.py (the TPU venv, .ci/tpu.sh)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_slurm_profile import dry_run_jobs

ROOT = Path(__file__).resolve().parents[1]
XLA_RULES = {"embed", "embed_shard", "train", "distill", "decoder", "evaluate", "trajectory",
             "score_dataset", "scorer"}


@pytest.fixture(scope="module")
def tpu_dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tpu_dry")
    env = {**os.environ, "ELF_DEVICE": "xla", "HF_HOME": str(tmp / "hf_home")}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "tpu", "-n", "-p", "--configfile",
         "config/ci.yaml", "--config", f"results={tmp}/results", f"reports={tmp}/reports", "--",
         f"{tmp}/reports/all"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_every_job_that_may_touch_the_tpu_holds_it(tpu_dry_run):
    assert "Using profiles tpu" in tpu_dry_run
    jobs = [j for j in dry_run_jobs(tpu_dry_run) if j["rule"] != "all"]
    assert {"train", "distill", "evaluate", "embed"} <= {j["rule"] for j in jobs}
    for job in jobs:
        held = job["resources"].get("tpu")
        assert held == ("1" if job["rule"] in XLA_RULES else None), (job["rule"], job["resources"])


def test_training_starts_its_own_replicas_and_embedding_goes_to_xla(tpu_dry_run):
    jobs = dry_run_jobs(tpu_dry_run)
    for job in jobs:
        if job["rule"] in ("train", "distill"):
            assert f" elf {job['rule']} " in job["shell"] and "torchrun" not in job["shell"]
            assert "--device" not in job["shell"]  # auto: $ELF_DEVICE
        if job["rule"] == "embed":
            assert job["shell"].split(" 2> ")[0].endswith("--device xla"), job["shell"]
