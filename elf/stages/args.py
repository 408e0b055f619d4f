"""The argument plumbing every stage shares: a JSON option (``--settings``, ``--sampler``, ``--plan``)
into the typed settings of ``elf.config``, refused in one line naming the option and the key.

    settings = parse_settings(args.settings, CorporaSettings, "corpora")
    train = parse_train_settings(args.settings)      # train, distill, release: run + data + embedding
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from elf.config import (PRECISIONS, ConfigError, DatasetSettings, EmbeddingSettings, RunSettings,
                        from_dict)
from elf.errors import ElfError

T = TypeVar("T")


def parse_json(text: str, option: str = "--settings") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ElfError(f"{option}: {err}") from err


def parse_settings(text: str, cls: type[T], section: str = "", option: str = "--settings") -> T:
    """``text`` (JSON) as the dataclass ``cls``; a bad key, type or value names ``section.key``."""
    return settings_of(parse_json(text, option), cls, section, option)


def settings_of(data: Any, cls: type[T], section: str = "", option: str = "--settings") -> T:
    """``data`` (parsed JSON) as the dataclass ``cls``, refused as ``parse_settings`` does."""
    try:
        return from_dict(cls, data, section)
    except ConfigError as err:
        raise ElfError(f"{option}: {err}") from err


def parse_sections(text: str, option: str = "--settings", **sections: type) -> dict[str, Any]:
    """A JSON object whose keys ``sections`` name each parsed into its dataclass; its other keys as
    they are. A missing section is refused."""
    data = parse_json(text, option)
    if not isinstance(data, dict):
        raise ElfError(f"{option}: expected a JSON object with keys {', '.join(sections)}")
    missing = [key for key in sections if key not in data]
    if missing:
        raise ElfError(f"{option}: no {', '.join(repr(k) for k in missing)} (expected keys "
                       f"{', '.join(sections)})")
    return {**data, **{key: settings_of(data[key], cls, key, option) for key, cls in sections.items()}}


@dataclass(frozen=True)
class TrainSettings:
    """What a training-kind stage (``train``, ``distill``, ``release``) is given: the workflow's
    ``--settings`` (keys run, dataset, embedding, sizes, precision)."""
    run: RunSettings
    dataset: DatasetSettings
    embedding: EmbeddingSettings
    sizes: dict
    precision: str


def parse_train_settings(text: str) -> TrainSettings:
    """The settings of a training-kind stage, checked by the rules plan time applies to the run
    (``elf.settings_checks``: presets, batch splitting, SC-CFG range, kind-only settings, ...), so a
    hand-run stage refuses what the DAG refuses, in the same words under the key ``run...``."""
    from elf.settings_checks import check_run, check_sizes

    data = parse_sections(text, run=RunSettings, dataset=DatasetSettings, embedding=EmbeddingSettings)
    precision = data.get("precision", "fp32")  # fp32 when absent
    if precision not in PRECISIONS:
        raise ElfError(f"--settings: unknown precision {precision!r}; expected one of "
                       f"{', '.join(PRECISIONS)}")
    sizes = data.get("sizes", {})
    if not isinstance(sizes, dict):
        raise ElfError(f"--settings: config key 'sizes': got {sizes!r}; expected a mapping")
    with refused_as("--settings"):
        check_sizes(sizes)
        check_run("run", data["run"], data["dataset"], data["embedding"], sizes)
    return TrainSettings(data["run"], data["dataset"], data["embedding"], sizes, precision)


@contextmanager
def refused_as(option: str):
    """A ``ConfigError`` of the shared rules as the one-line ``ElfError`` of ``option``."""
    try:
        yield
    except ConfigError as err:
        raise ElfError(f"{option}: {err}") from err


def resolve_device(name: str):
    """A stage's ``--device`` as a ``torch.device`` (``elf.device.resolve``: ``auto`` → ``$ELF_DEVICE``,
    else CUDA when available, else CPU; ``xla`` through torch_xla); an unavailable one is an ElfError."""
    from elf.device import resolve

    with device_errors(name):
        return resolve(name)


@contextmanager
def device_errors(name: str):
    """An ``elf.device.DeviceError`` raised inside (torch_xla missing, a multi-host slice) becomes an
    ElfError naming ``--device name``."""
    from elf.device import DeviceError

    try:
        yield
    except DeviceError as err:
        raise ElfError(f"--device {name}: {err}") from err
