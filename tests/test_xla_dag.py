"""The CI DAG's train → sample → score chain on the XLA device (XLA CPU backend), as a TPU VM runs
it: ``ELF_DEVICE=xla snakemake ...`` with the real rules, after the data, tokenizer, encoder, scorer
and embedding store were built on the CPU. The host has two XLA CPU devices (``CPU_NUM_DEVICES=2``):
``elf train`` and ``elf distill`` run data parallel (SPMD) over both, the other stages on the first.
A distillation round, ``elf embed`` and ``elf score`` on XLA are checked against their CPU results. Every XLA job writes torch_xla's metrics report to its log
(``XLA_METRICS_FILE=STDERR``), which shows it ran on XLA and how often it compiled. Skipped without
torch_xla (tests/xla_util.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.xla_util import DEVICE  # noqa: F401,I001 (skips the module without torch_xla)

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
XLA_ENV = {"ELF_DEVICE": "xla", "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2",
           "XLA_METRICS_FILE": "STDERR"}
CPU_ENV = {"ELF_DEVICE": "cpu"}


def snakemake(configfile, *targets, env):
    proc = subprocess.run(["snakemake", *map(str, targets), "--cores", "2", "--configfile",
                           str(configfile)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-4000:]


def elf(*args, env):
    proc = subprocess.run([sys.executable, "-m", "elf", *map(str, args)], cwd=ROOT, text=True,
                          capture_output=True, timeout=900, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def compile_counts(log: Path) -> list[int]:
    """CompileTime's sample count in each metrics report of a job's log (one per torch_xla.sync)."""
    counts = []
    for report in log.read_text().split("[MetricsData; step=")[1:]:
        match = re.search(r"Metric: CompileTime\n\s+TotalSamples: (\d+)", report)
        counts.append(int(match.group(1)) if match else 0)
    return counts


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """config/ci.yaml cut to its base run, one distillation round and one figure's two samplers."""
    tmp = tmp_path_factory.mktemp("xla_dag")
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["results"], cfg["reports"] = str(tmp / "results"), str(tmp / "reports")
    cfg["runs"] = {name: cfg["runs"][name] for name in ("base", "pd_r1")}
    cfg["figures"] = {"F4": {**cfg["figures"]["F4"], "samplers": ["ode16_w1", "sde8"]}}
    cfg["trends"] = {}
    configfile = tmp / "ci_xla.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    R = tmp / "results"
    snakemake(configfile, R / "embeddings/owt/encoder/train.zarr", R / "models/scorer",
              R / "models/tokenizer", env=CPU_ENV)
    snakemake(configfile, R / "evals/base/all", R / "runs/pd_r1/ema.safetensors", env=XLA_ENV)
    return R


def test_training_and_distillation_ran_on_xla_and_compiled_only_at_their_first_steps(chain):
    for log, steps in ((chain / "logs/train/base.log", 20), (chain / "logs/distill/pd_r1.log", 4)):
        # SPMD programs run through ExecuteReplicated (one device's run through ExecuteComputation)
        assert "Metric: ExecuteReplicatedTime" in log.read_text(), f"{log}: not data parallel"
        counts = compile_counts(log)
        print(f"{log.name}: XLA compilations after each step: {counts}")
        assert len(counts) == steps, f"{log}: {len(counts)} XLA steps, expected {steps}"
        assert counts[1] == counts[-1] <= 3, f"{log}: compilations grew after step 2: {counts}"
    lines = [json.loads(line) for line in (chain / "runs/base/train_log.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [5, 10, 15, 20]
    assert all(np.isfinite(line["loss"]) for line in lines)
    assert not (chain / "runs/base/resume").exists()


def test_sampling_and_scoring_ran_on_xla(chain):
    log = chain / "logs/evaluate/base/all.log"
    assert "Metric: ExecuteReplicatedTime" not in log.read_text()  # one device: no SPMD
    counts = compile_counts(log)
    print(f"evaluate (2 samplers, then Gen. PPL): {len(counts)} XLA graphs run, "
          f"{counts[-1]} compiled")
    assert counts and counts[-1] < len(counts)  # graphs are reused across steps, seeds and samplers
    for sampler in ("ode16_w1", "sde8"):
        files = sorted((chain / f"evals/base/all/samples/{sampler}").glob("seed*.jsonl"))
        assert files, sampler
        for path in files:
            header, *rows = path.read_text().splitlines()
            assert len(rows) == 8 and json.loads(header)["provenance"]["sampler"] == sampler
            score = json.loads((chain / f"evals/base/all/scores/{sampler}/{path.stem}.json").read_text())
            assert score["metrics"]["n_samples"] + score["metrics"]["n_empty"] == 8
        aggregate = json.loads((chain / f"evals/base/all/aggregates/{sampler}.json").read_text())
        assert aggregate


def test_scoring_on_xla_equals_scoring_on_the_cpu(chain, tmp_path):
    samples = chain / "evals/base/all/samples/ode16_w1/seed0.jsonl"
    args = ["score", "--samples", samples, "--task", "unconditional", "--scorer", chain / "models/scorer",
            "--batch-size", 8]
    elf(*args, "--device", "xla", "--out", tmp_path / "xla.json", env=XLA_ENV)
    elf(*args, "--device", "cpu", "--out", tmp_path / "cpu.json", env=CPU_ENV)
    xla, cpu = (json.loads((tmp_path / f"{d}.json").read_text())["metrics"] for d in ("xla", "cpu"))
    if cpu["gen_ppl"] is None:
        assert xla["gen_ppl"] is None
    else:
        assert xla["gen_ppl"] == pytest.approx(cpu["gen_ppl"], rel=1e-4)
    assert xla["entropy"] == cpu["entropy"] and xla["n_scored_tokens"] == cpu["n_scored_tokens"]


def test_embedding_on_xla_equals_embedding_on_the_cpu(chain, tmp_path):
    from elf.embed.store import from_storage, open_store

    settings = json.dumps({"kind": "encoder", "encoder": "main", "normalization": "scalar",
                           "dtype": "float16"})
    args = ["embed", "--settings", settings, "--encoder", chain / "models/encoder-main",
            "--tokens", chain / "data/owt/tokens", "--split", "validation", "--batch-size", 16]
    elf(*args, "--device", "xla", "--out", tmp_path / "xla.zarr", env=XLA_ENV)
    elf(*args, "--device", "cpu", "--out", tmp_path / "cpu.zarr", env=CPU_ENV)
    stores = [open_store(tmp_path / f"{d}.zarr") for d in ("xla", "cpu")]
    xla, cpu = (from_storage(s.read_rows(0, len(s))["embeddings"], "float16") for s in stores)
    assert xla.shape == cpu.shape and len(stores[0]) == len(stores[1]) > 0
    np.testing.assert_allclose(xla.numpy(), cpu.numpy(), rtol=2e-3, atol=2e-3)  # float16 storage
