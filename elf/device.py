"""The device a stage runs on — ``cuda``, ``cpu`` or ``xla`` (TPU through torch_xla) — and the few
calls that differ on XLA. Every stage's ``--device`` goes through ``resolve``.

- ``auto`` is ``$ELF_DEVICE`` when that is set (how a TPU VM runs the whole DAG on ``xla``,
  docs/cluster.md), else CUDA when available, else the CPU.
- ``xla`` needs torch_xla (``environment-tpu.yml``); without it ``resolve`` raises ``DeviceError``
  naming what to install. ``PJRT_DEVICE`` picks the XLA backend (``TPU``; ``CPU`` in the tests).
- XLA tensors are lazy: a step's operations are recorded and compiled into one graph when ``sync``
  cuts it (``torch_xla.sync``, the former ``xm.mark_step``). The graph is compiled once per distinct
  structure, so the hot loops keep shapes static and read nothing back to the host inside a step.
  ``sync`` does nothing elsewhere, so shared code calls it unconditionally.
- Data parallel on XLA (``elf train``/``distill``) is SPMD over every XLA device of the host
  (``data_parallel_device``): one process and one program; the loop marks each global micro-batch's
  tensors split by rows over a one-axis mesh (``shard_rows``), so device k holds rows k·B/n … of the
  seeded global draw, as DDP rank k would, and XLA's partitioner inserts the gradient all-reduce.
  The step is the single-device step on the whole micro-batch, to float rounding. (Per-device
  processes with ``xm.all_reduce`` cannot be tested here: XLA's CPU backend has no cross-process or
  cross-thread collectives, pytorch/xla#9089; SPMD runs on ``CPU_NUM_DEVICES`` > 1.) Multi-host pod
  slices and torchrun are refused (``DeviceError``): every process would write the run directory
  (and multi-host is untested).

No torch_xla import happens unless an XLA device is asked for.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

DEVICE_ENV = "ELF_DEVICE"
CACHE_ENV = "ELF_XLA_CACHE"


class DeviceError(RuntimeError):
    """The device asked for is not available here (the message says what to install or set)."""


def requested(name: str) -> str:
    """The device name ``name`` stands for, without touching any runtime: ``auto`` →
    ``$ELF_DEVICE``, else ``cuda`` when available, else ``cpu``."""
    if name == "auto":
        name = os.environ.get(DEVICE_ENV, "").strip() or "auto"
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def torch_xla_module():
    """``torch_xla``, imported; ``DeviceError`` when it is not installed."""
    try:
        import torch_xla
    except ImportError as err:
        raise DeviceError(
            f"device xla needs torch_xla, which is not installed here ({err}); install the TPU "
            "environment (environment-tpu.yml: torch==2.9.0 with torch-xla==2.9.0) and set "
            "PJRT_DEVICE (TPU, or CPU to test)") from err
    return torch_xla


def resolve(name: str) -> torch.device:
    """A ``torch.device`` for a stage's ``--device`` (module docstring); ``xla`` is this process's
    XLA device, which starts the XLA runtime."""
    name = requested(name)
    if name.split(":")[0] == "xla":
        torch_xla = torch_xla_module()
        _persistent_cache(torch_xla)
        # Python scalars (a step's lr, EMA weight, Nesterov coefficients, sampler step sizes) are
        # graph inputs; with this cache two of them that happen to be equal share one input, a new
        # graph structure, and a recompile (seen at the EMA warm-up's weight 0.5).
        torch_xla._XLAC._set_xla_enable_device_data_cache(False)
        return torch_xla.device()
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise DeviceError(f"unknown device {name!r} (expected auto, cpu, cuda[:k] or xla)") from err


def _persistent_cache(torch_xla) -> None:
    """``$ELF_XLA_CACHE``: a folder where compiled XLA programs persist, so that the next process
    with the same graphs (every sampling job of a run, a resumed training job) loads them instead of
    compiling. Set once per process, before the runtime starts."""
    path = os.environ.get(CACHE_ENV)
    if path and not torch_xla._XLAC._xla_computation_cache_is_initialized():
        import torch_xla.runtime as xr

        xr.initialize_cache(path, readonly=False)


def is_xla(device: torch.device | str | torch.Tensor) -> bool:
    if isinstance(device, torch.Tensor):
        device = device.device
    return torch.device(device).type == "xla"


def sync(device: torch.device | str | torch.Tensor) -> None:
    """Cut and run the pending XLA graph (a step's end); nothing off XLA."""
    if is_xla(device):
        torch_xla_module().sync()


def to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it (nested dicts, lists, tuples) moved to the CPU: what a
    checkpoint holds, whichever device trained it (a CPU tensor is returned as it is)."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def data_parallel_device() -> torch.device:
    """The XLA device of a training stage: with several XLA devices on this host, SPMD over all of
    them (module docstring; ``xr.use_spmd`` before any tensor is placed), else the one device."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise DeviceError("on xla one process trains over every XLA device of the host (SPMD): run "
                          "the stage without torchrun")
    torch_xla = torch_xla_module()
    _persistent_cache(torch_xla)
    import torch_xla.runtime as xr

    if xr.process_count() > 1:
        raise DeviceError(f"{xr.process_count()} XLA processes (a multi-host TPU slice): data parallel "
                          "here spans one host's devices; run the stage on a single-host slice")
    if xr.global_runtime_device_count() > 1 and not xr.is_spmd():
        xr.use_spmd()
    return resolve("xla")


def data_parallel_size(device: torch.device | str) -> int:
    """How many devices split each micro-batch's rows on ``device``: the SPMD mesh's, else 1."""
    return int(_mesh().size()) if is_xla(device) and _spmd() else 1


def shard_rows(tensors) -> None:
    """Mark each XLA tensor's first dimension split over the data-parallel mesh (rows k·B/n … on
    device k); nothing off SPMD."""
    tensors = [x for x in tensors if isinstance(x, torch.Tensor) and is_xla(x)]
    if not tensors or not _spmd():
        return
    import torch_xla.distributed.spmd as xs

    mesh = _mesh()
    for x in tensors:
        xs.mark_sharding(x, mesh, ("data",) + (None,) * (x.dim() - 1))


def _spmd() -> bool:
    import torch_xla.runtime as xr

    return xr.is_spmd()


@functools.cache
def _mesh():
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    n = xr.global_runtime_device_count()
    return xs.Mesh(np.arange(n), (n,), ("data",))
