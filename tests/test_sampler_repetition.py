"""benchmarks/sampler_repetition.py: bad variants and a results folder without the run fail by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sampler_repetition.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_a_variant_without_key_value_is_refused(tmp_path):
    done = run("--results", str(tmp_path), "steps16")
    assert done.returncode == 2 and "variant 'steps16': expected key=value" in done.stderr


def test_an_unknown_sampler_key_is_refused_before_anything_loads(tmp_path):
    (tmp_path / "runs" / "base").mkdir(parents=True)
    (tmp_path / "runs" / "base" / "ema.safetensors").write_bytes(b"")   # never read: the key fails first
    done = run("--results", str(tmp_path), "stepz=16")
    assert done.returncode == 2 and "'variant stepz=16.stepz' is unknown" in done.stderr


def test_a_results_folder_without_the_run_names_the_missing_checkpoint(tmp_path):
    done = run("--results", str(tmp_path), "--run", "base", "sc_cfg=1")
    assert done.returncode == 2
    assert f"no checkpoint at {tmp_path / 'runs' / 'base'}" in done.stderr
