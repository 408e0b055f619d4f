"""Checkpoints: the self-describing final checkpoint, exact-resume state, the authors' releases, and
a separate decoder's folder (``save_decoder`` / ``load_decoder``). File names: ``elf.artifacts.names``.

A run directory (``results/runs/<run>/``) holds
- ``ema.safetensors`` / ``model.safetensors``: EMA and raw weights (safetensors: no code is unpickled),
- ``config.json``: the model config and run settings — the model rebuilds from the checkpoint alone,
- ``checksums.json``: size and sha256 of both weight files, written last; ``load_model`` verifies the
  weights against it (``elf.artifacts``), so a damaged or replaced file is refused, never sampled,
- ``resume/state.pt`` while training: optimiser, EMA, step, data position and RNG states, loaded
  with ``weights_only=True``; removed once the run completes so a changed rerun starts afresh. It is
  replaced in one rename (the one before kept as ``state.prev.pt``), and an unreadable one (a torn
  copy, a full disk) is skipped with a warning for the previous one, else a fresh start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_file

from elf.artifacts import (ArtifactError, MissingArtifactError, load_safetensors, read_json,
                           verified_sha256, write_checksums)
from elf.artifacts.names import (CHECKSUMS, DECODER_CONFIG, DECODER_WEIGHTS, EMA_WEIGHTS, RAW_WEIGHTS, RESUME_DIR,
                                 PROVENANCE, RUN_CONFIG, RUN_MODEL)
from elf.io import atomic_path, provenance
from elf.model import ELF, ModelConfig

WEIGHT_FILES = (RAW_WEIGHTS, EMA_WEIGHTS)
WEIGHTS = {"ema": EMA_WEIGHTS, "model": RAW_WEIGHTS}  # load_model's ``weights``
RERUN = "rerun its train rule"


def save_final(out_dir: Path, model_state: dict, ema_state: dict, meta: dict) -> None:
    """Write weights + config.json, every file to a temporary sibling first and renamed into place
    only once all three are written (a full disk replaces none of them), then their checksums."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as files:
        for name, state in zip(WEIGHT_FILES, (model_state, ema_state)):
            tmp = files.enter_context(atomic_path(out_dir / name))
            save_file({k: v.detach().float().cpu().contiguous() for k, v in state.items()}, str(tmp))
        tmp = files.enter_context(atomic_path(out_dir / RUN_CONFIG))
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    write_checksums(out_dir, (*WEIGHT_FILES, RUN_CONFIG))  # config.json too: its fingerprint


def read_meta(ckpt_dir: Path) -> dict:
    path = Path(ckpt_dir) / RUN_CONFIG
    if not path.exists():
        raise MissingArtifactError(f"{path} not found: {ckpt_dir} is not a finished ELF checkpoint "
                                   f"({RERUN})")
    meta = read_json(path, "checkpoint config")
    if not isinstance(meta, dict) or not isinstance(meta.get(RUN_MODEL), dict):
        raise ArtifactError(f"checkpoint config {path}: no '{RUN_MODEL}' mapping (not written by elf; "
                            f"{RERUN})")
    _check_config_fingerprint(path)
    return meta


def _check_config_fingerprint(path: Path) -> None:
    """``config.json`` is the one its checkpoint was written with: its sha256 against the one
    ``checksums.json`` records (checkpoints written before config.json was listed are not checked)."""
    from elf.artifacts import file_sha256

    record = path.parent / CHECKSUMS
    recorded = read_json(record, "checksums").get(RUN_CONFIG) if record.is_file() else None
    if isinstance(recorded, dict) and file_sha256(path) != recorded.get("sha256"):
        raise ArtifactError(f"{path}: this config.json is not this checkpoint's (its sha256 is not the "
                            f"one {record} records for the weights beside it: copied from another run "
                            f"or edited); {RERUN}")


def load_model(ckpt_dir: Path, weights: str = "ema", device="cpu") -> tuple[ELF, dict]:
    """Rebuild the network from ``config.json`` and load its EMA (default) or raw weights, verified
    against ``checksums.json``."""
    meta = read_meta(ckpt_dir)
    path = Path(ckpt_dir) / WEIGHTS[weights]
    verified_sha256(path, RERUN)
    try:
        model = ELF(ModelConfig(**meta[RUN_MODEL]))
        model.load_state_dict(load_safetensors(path), strict=True)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ArtifactError(f"{path}: does not fit the network of {Path(ckpt_dir) / RUN_CONFIG} "
                            f"({str(err).splitlines()[0]}); {RERUN}") from err
    return model.to(device).eval(), meta


def checkpoint_sha256(ckpt_dir: Path, weights: str = "ema") -> str:
    """The verified sha256 of a checkpoint's weights (computed once per process)."""
    return verified_sha256(Path(ckpt_dir) / WEIGHTS[weights], RERUN)


def save_resume(out_dir: Path, state: dict) -> None:
    """Replace ``resume/state.pt`` in one rename, keeping the one before as ``state.prev.pt``."""
    folder = Path(out_dir) / RESUME_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "state.pt") as tmp:
        torch.save(state, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if (folder / "state.pt").exists():
            os.replace(folder / "state.pt", folder / "state.prev.pt")


def load_resume(out_dir: Path) -> dict | None:
    """The newest readable resume state; an unreadable one is skipped with a warning."""
    folder = Path(out_dir) / RESUME_DIR
    for name in ("state.pt", "state.prev.pt"):
        path = folder / name
        if not path.exists():
            continue
        try:
            return torch.load(path, weights_only=True, map_location="cpu")
        except Exception as err:  # a torn or damaged file: zip, unpickling or EOF errors
            reason = (str(err).split(". ")[0] or type(err).__name__).splitlines()[0]
            warnings.warn(f"{path} is unreadable ({reason}): ignoring it", RuntimeWarning, stacklevel=2)
    if folder.exists():
        warnings.warn(f"no readable resume state in {folder}: training starts from scratch",
                      RuntimeWarning, stacklevel=2)
    return None


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
    """A run's ``config.json``: the network's ``ModelConfig`` and what the stage records beside it."""
    return {RUN_MODEL: dataclasses.asdict(cfg), **extra}


# --------------------------------------------------------------------------------------------------
# A separate decoder's folder (Fig. 5b): ``elf decoder`` writes it, ``elf sample --decoder`` reads it
# --------------------------------------------------------------------------------------------------

def save_decoder(out_dir: Path, decoder, meta: dict) -> None:
    """config.json, then model.safetensors (the rule's output), each replaced in one rename, then
    the weights' checksums.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / DECODER_CONFIG) as tmp:
        tmp.write_text(json.dumps({**meta, PROVENANCE: provenance()}, indent=2, sort_keys=True,
                                  default=str) + "\n")
    state = {k: v.detach().float().cpu().contiguous() for k, v in decoder.state_dict().items()}
    with atomic_path(out_dir / DECODER_WEIGHTS) as tmp:
        save_file(state, str(tmp))
    write_checksums(out_dir, [DECODER_WEIGHTS])


def load_decoder(path, device="cpu"):
    """(SeparateDecoder in eval mode, its config.json) from a directory written by ``elf decoder``,
    the weights verified against checksums.json."""
    from elf.decoder import DecoderConfig, SeparateDecoder

    path = Path(path)
    if not (path / DECODER_WEIGHTS).exists() or not (path / DECODER_CONFIG).exists():
        raise MissingArtifactError(f"{path} is not a finished decoder (rerun its decoder rule)")
    verified_sha256(path / DECODER_WEIGHTS, "rerun its decoder rule")
    meta = read_json(path / DECODER_CONFIG, "decoder config")
    try:
        decoder = SeparateDecoder(DecoderConfig(**meta["decoder"]))
        decoder.load_state_dict(load_safetensors(path / DECODER_WEIGHTS), strict=True)
    except (KeyError, TypeError, RuntimeError) as err:
        raise ArtifactError(f"{path}: {DECODER_WEIGHTS} does not fit {DECODER_CONFIG} ({err})") from err
    return decoder.to(device).eval(), meta
