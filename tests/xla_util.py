"""Shared by the XLA tests (tests/test_xla_*.py). Importing it skips the importing module unless
torch_xla is installed (the TPU venv of .ci/tpu.sh; the main suite, on torch 2.13, has none), and
starts the XLA runtime on ``PJRT_DEVICE`` (default CPU: the XLA CPU device, no TPU needed).

The runtime starts at import, before any test runs a backward on the CPU: autograd sizes its
per-device queues at the first backward, and an XLA backward after that fails an internal assert."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")
pytest.importorskip("torch_xla", reason="needs torch_xla: the TPU environment's tests run in its "
                    "own venv (.ci/tpu.sh), not on the main suite's torch 2.13")

import torch_xla.debug.metrics as met  # noqa: E402

from elf.device import resolve  # noqa: E402

DEVICE = resolve("xla")


def compiles() -> int:
    """XLA compilations in this process so far."""
    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def fallbacks() -> dict[str, int]:
    """Ops that ran on the host instead of the device (``aten::`` counters), but for
    ``_local_scalar_dense``: reading a finished value (a log line, a test's comparison)."""
    return {name: met.counter_value(name) for name in met.counter_names()
            if name.startswith("aten::") and name != "aten::_local_scalar_dense"}


def on_cpu_then_xla(run, *args):
    """``run(*args, "cpu")`` and ``run(*args, DEVICE)``, failing if an op of the XLA one ran on the
    host (``fallbacks``)."""
    cpu = run(*args, "cpu")
    before = fallbacks()
    xla = run(*args, DEVICE)
    assert fallbacks() == before, f"an op of {run.__name__} ran on the host"
    return cpu, xla
