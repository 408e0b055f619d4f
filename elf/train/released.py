"""The authors' released checkpoints: the weights a ``checkpoint_<step>`` file holds, and the
``config.yml`` it was trained with, checked against a run's settings (``elf release`` runs these).

The authors' ``save_checkpoint`` writes ``torch.save`` of a dict with ``params`` (raw weights),
``ema_params1`` (EMA weights), ``opt_state``, ``lr_scheduler``, ``step``, ``epoch``, ``dropout_rng``
and ``grad_accum_buffers``; their loader takes ``ema_params1`` and falls back to ``params`` when it
is absent (``read_checkpoint`` does the same and says which it took). ``config.yml`` holds their
``Config`` keys; a key it omits has their class default (``AUTHORS_DEFAULTS``).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

EMA_KEY, RAW_KEY = "ema_params1", "params"
# The authors' Config class defaults (src/configs/config.py) for the keys compared here.
AUTHORS_DEFAULTS = {"model": "ELF-B", "bottleneck_dim": 128, "max_length": 128,
                    "max_input_length": None, "pad_token": "pad", "latent_mean": 0.0,
                    "latent_std": 1.0}


class ReleasedCheckpointError(ValueError):
    """A released file or config.yml that cannot be used; the message names it and the problem."""


@dataclass
class ReleasedWeights:
    """The network's weights (EMA, or raw where the file has no EMA), the raw weights, and what the
    file said about them."""
    ema: dict
    raw: dict
    ema_from: str          # the entry the network's weights came from, as config.json records it
    raw_from: str
    step: int | None
    epoch: int | None
    keys: list[str]


def _state(blob: dict, key: str) -> dict | None:
    value = blob.get(key)
    return {k: v.float() for k, v in value.items()} if isinstance(value, dict) and value else None


def read_checkpoint(path: Path) -> ReleasedWeights:
    """The weights of a released file (float32); the optimiser and scheduler states stay unread
    (memory-mapped, so a 10 GB ELF-L file costs only its weights)."""
    import torch

    try:
        blob = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
        raise ReleasedCheckpointError(f"{path}: not a checkpoint torch.load can read safely "
                                      f"(weights_only=True): {str(err).splitlines()[0]}") from err
    if not isinstance(blob, dict):
        raise ReleasedCheckpointError(f"{path}: holds a {type(blob).__name__}, not the authors' "
                                      "checkpoint dict")
    ema, raw = _state(blob, EMA_KEY), _state(blob, RAW_KEY)
    if ema is None and raw is None:
        raise ReleasedCheckpointError(f"{path}: no '{EMA_KEY}' or '{RAW_KEY}' entry (the weights "
                                      f"of a released checkpoint); found {', '.join(map(str, blob))}")
    ema_from = EMA_KEY if ema is not None else \
        f"{RAW_KEY} (the file has no '{EMA_KEY}'; the authors' loader falls back to '{RAW_KEY}')"
    raw_from = RAW_KEY if raw is not None else f"{EMA_KEY} (the file has no '{RAW_KEY}')"
    step, epoch = blob.get("step"), blob.get("epoch")
    return ReleasedWeights(ema if ema is not None else raw, raw if raw is not None else ema,
                           ema_from, raw_from, None if step is None else int(step),
                           None if epoch is None else int(epoch), sorted(map(str, blob)))


def read_config_yml(path: Path) -> dict:
    """The training settings a release names (``config.yml``)."""
    import yaml

    try:
        settings = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ReleasedCheckpointError(f"{path}: cannot be read as YAML: {err}") from err
    if not isinstance(settings, dict):
        raise ReleasedCheckpointError(f"{path}: not a mapping of training settings")
    return settings


def checked_settings(yml: dict) -> dict:
    """The ``config.yml`` values the run is checked against (defaults filled in)."""
    return {key: yml.get(key, default) for key, default in AUTHORS_DEFAULTS.items()}


def config_mismatches(yml: dict, run_s, data_s, emb_s) -> list[str]:
    """Where ``config.yml`` disagrees with the run's settings: size, bottleneck, sequence layout,
    padding (EOS for conditional data, spec §2) and the fixed normalisation."""
    got = checked_settings(yml)
    wanted = {"model": run_s.model.size, "bottleneck_dim": run_s.model.bottleneck,
              "max_length": data_s.max_length, "max_input_length": data_s.max_input_length,
              "pad_token": "pad" if data_s.task == "unconditional" else "eos"}
    problems = [f"{key}: config.yml {got[key]!r}, run settings {value!r}"
                for key, value in wanted.items() if got[key] != value]
    mean, std = got["latent_mean"], got["latent_std"]
    if emb_s.normalization != "fixed" or (emb_s.mean, emb_s.std) != (mean, std):
        problems.append(f"normalisation: config.yml fixed mean {mean} / std {std}, the run's "
                        f"embedding {emb_s.normalization} mean {emb_s.mean} / std {emb_s.std}")
    return problems
