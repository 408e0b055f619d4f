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
- Data parallel on XLA (``elf train``/``distill``) is one replica per XLA device started by
  ``torch_xla.launch`` — processes on a TPU VM, threads on the CPU backend (``CPU_NUM_DEVICES``) —
  rather than torchrun; ``replica`` gives a replica its rank, world size and device.

No torch_xla import happens unless an XLA device is asked for.
"""

from __future__ import annotations

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


def wants_xla(name: str) -> bool:
    return requested(name).split(":")[0] == "xla"


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
    (or replica thread's) XLA device, which starts the XLA runtime."""
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


def replica() -> tuple[int, int, torch.device]:
    """(rank, world size, device) of this XLA replica (inside ``launch``, or alone)."""
    device = resolve("xla")
    import torch_xla.runtime as xr

    return xr.global_ordinal(), xr.world_size(), device


def launch(fn, args: tuple = ()) -> None:
    """Run ``fn(index, *args)`` once per XLA device of this host (``torch_xla.launch``)."""
    if "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ:
        raise DeviceError("on xla the stage starts one replica per XLA device itself "
                          "(torch_xla.launch): run it without torchrun")
    # One CPU device: run here (torch_xla.launch would spawn a process for it).
    single = os.environ.get("PJRT_DEVICE") == "CPU" and os.environ.get("CPU_NUM_DEVICES", "1") == "1"
    torch_xla_module().launch(fn, args, debug_single_process=single)
