"""Checkpoints: the self-describing final checkpoint, exact-resume state, and the authors' releases.

A run directory (``results/runs/<run>/``) holds
- ``ema.safetensors`` / ``model.safetensors``: EMA and raw weights (safetensors: no code is unpickled),
- ``config.json``: the model config and run settings — the model rebuilds from the checkpoint alone,
- ``resume/state.pt`` while training: optimiser, EMA, step, data position and RNG states, loaded
  with ``weights_only=True``; removed once the run completes so a changed rerun starts afresh.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from elf.io import atomic_dir, atomic_path, sha256_file
from elf.model import ELF, ModelConfig

RESUME_DIR = "resume"


def save_final(out_dir: Path, model_state: dict, ema_state: dict, meta: dict) -> None:
    """Write weights + config.json atomically (each file replaced in one rename)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, state in (("model.safetensors", model_state), ("ema.safetensors", ema_state)):
        with atomic_path(out_dir / name) as tmp:
            save_file({k: v.detach().float().cpu().contiguous() for k, v in state.items()}, str(tmp))
    with atomic_path(out_dir / "config.json") as tmp:
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")


def read_meta(ckpt_dir: Path) -> dict:
    path = Path(ckpt_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: {ckpt_dir} is not a finished ELF checkpoint "
                                "(rerun its train rule)")
    return json.loads(path.read_text())


def load_model(ckpt_dir: Path, weights: str = "ema", device="cpu") -> tuple[ELF, dict]:
    """Rebuild the network from ``config.json`` and load its EMA (default) or raw weights."""
    meta = read_meta(ckpt_dir)
    model = ELF(ModelConfig(**meta["model"]))
    state = load_file(str(Path(ckpt_dir) / f"{weights}.safetensors"))
    model.load_state_dict(state, strict=True)
    return model.to(device).eval(), meta


def checkpoint_sha256(ckpt_dir: Path, weights: str = "ema") -> str:
    return sha256_file(Path(ckpt_dir) / f"{weights}.safetensors")


def save_resume(out_dir: Path, state: dict) -> None:
    """Atomically replace ``resume/`` with the given training state."""
    with atomic_dir(Path(out_dir) / RESUME_DIR) as tmp:
        torch.save(state, tmp / "state.pt")


def load_resume(out_dir: Path) -> dict | None:
    path = Path(out_dir) / RESUME_DIR / "state.pt"
    if not path.exists():
        return None
    return torch.load(path, weights_only=True, map_location="cpu")


def clear_resume(out_dir: Path) -> None:
    shutil.rmtree(Path(out_dir) / RESUME_DIR, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# The authors' released PyTorch checkpoints (spec §3 parameter layout)
# --------------------------------------------------------------------------------------------------

def config_from_state_dict(state: dict, max_length: int = 1024) -> ModelConfig:
    """Infer the network shape from a state dict in the released layout."""
    depth = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    width = state["text_proj.proj2.weight"].shape[0]
    head_dim = state["blocks.0.attn.q_norm.weight"].shape[0]
    conditioning = "in_context" if "t_emb_tokens" in state else "adaln"
    fields = dict(depth=depth, width=width, heads=width // head_dim,
                  d=state["final_layer.linear.weight"].shape[0],
                  bottleneck=state["text_proj.proj1.weight"].shape[0], max_length=max_length,
                  conditioning=conditioning, decode_head="unembed_kernel" in state)
    if "unembed_kernel" in state:
        fields["vocab_size"] = state["unembed_kernel"].shape[1]
    if conditioning == "in_context":
        fields.update(num_time_tokens=state["t_emb_tokens"].shape[1],
                      num_cfg_tokens=state["self_cond_cfg_tokens"].shape[1],
                      num_mode_tokens=state["mode_tokens"].shape[1])
    return ModelConfig(**fields)


def load_released(path: str | os.PathLike, weights: str = "ema") -> tuple[ELF, ModelConfig]:
    """Load a released ``torch.save`` dict with ``params`` and ``ema_params1`` (no unpickling of
    code: ``weights_only=True``). ``weights``: "ema" or "params"."""
    blob = torch.load(path, weights_only=True, map_location="cpu")
    key = {"ema": "ema_params1", "params": "params"}[weights]
    if key not in blob:
        raise KeyError(f"{path}: no '{key}' entry (found {', '.join(blob)})")
    state = {k: v.float() for k, v in blob[key].items()}
    cfg = config_from_state_dict(state)
    model = ELF(cfg)
    model.load_state_dict(state, strict=True)
    return model.eval(), cfg


def model_meta(cfg: ModelConfig, **extra) -> dict:
    return {"model": dataclasses.asdict(cfg), **extra}
