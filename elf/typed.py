"""Typed settings from plain mappings and back: the dataclass machinery under ``elf.config``.

``from_dict(cls, data)`` builds a (nested) dataclass from a loaded YAML/JSON mapping and raises
``ConfigError`` naming the key, the bad value and what is allowed; ``to_dict`` is the inverse;
``setting(...)`` declares a field with its description and numeric range (read by ``from_dict`` and by
the JSON schema generator, ``elf.schema``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from dataclasses import field
from typing import Any, Literal, get_args, get_origin


class ConfigError(ValueError):
    """A configuration value is unknown, mistyped or out of range."""


def setting(default: Any = dataclasses.MISSING, *, help: str, lo: float | None = None,
       hi: float | None = None, lo_open: bool = False, factory: Any = None):
    """A dataclass field with a description and an optional numeric range."""
    meta = {"help": help, "lo": lo, "hi": hi, "lo_open": lo_open}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is tuple:
        return "a list"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string",
            type(None): "null"}.get(tp, str(tp))


class _Refusal(ConfigError):
    """A mistyped value; its message names the expected type, formatted when shown."""

    def __init__(self, key: str, value: Any, tp: Any):
        super().__init__(key, value, tp)

    def __str__(self) -> str:
        key, value, tp = self.args
        return f"config key '{key}': got {value!r}; expected {_type_name(tp)}"


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = get_origin(tp)
    bad = _Refusal(key, value, tp)  # the message is formatted only when raised
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                return _convert(value, arg, key)
    if origin is Literal:
        if value not in get_args(tp):
            raise bad
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise bad
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"config key '{key}': got {value!r}; expected {len(args)} values")
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        value_tp = get_args(tp)[1]
        return {str(k): _convert(v, value_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if not math.isfinite(value):  # NaN passes every < / > range test: refuse it here
            raise ConfigError(f"config key '{key}': got {value!r}; allowed: a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    raise TypeError(f"unsupported config type {tp} at {key}")


def _check_range(value: Any, meta: dict, key: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    lo, hi, lo_open = meta.get("lo"), meta.get("hi"), meta.get("lo_open")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        op = ">" if lo_open else ">="
        raise ConfigError(f"config key '{key}': got {value!r}; allowed: {op} {lo}"
                          + (f" and <= {hi}" if hi is not None else ""))
    if hi is not None and value > hi:
        raise ConfigError(f"config key '{key}': got {value!r}; allowed: <= {hi}")


def from_dict(cls, data: Any, prefix: str = ""):
    """Build dataclass ``cls`` from a mapping, naming the key of any unknown, mistyped or
    out-of-range value."""
    where = prefix or "<top level>"
    if not isinstance(data, dict):
        raise ConfigError(f"config key '{where}': got {data!r}; expected a mapping")
    hints, fields = _fields_of(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"config key '{_join(prefix, unknown[0])}' is unknown; allowed keys "
                          f"under '{where}': {', '.join(fields)}")
    kwargs = {}
    for name, fld in fields.items():
        key = _join(prefix, name)
        if name not in data:
            if fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config key '{key}' is required ({fld.metadata.get('help')})")
            continue
        value = _convert(data[name], hints[name], key)
        _check_range(value, fld.metadata, key)
        kwargs[name] = value
    return cls(**kwargs)


@functools.lru_cache(maxsize=None)
def _fields_of(cls) -> tuple[dict, dict]:
    """The resolved type hints and fields of a settings class (resolving the string annotations
    costs more than the conversion itself: once per class)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def to_dict(obj: Any) -> Any:
    """Dataclass → plain JSON-ready dict (tuples become lists, keys strings): what a JSON round trip
    of ``dataclasses.asdict`` gives, without its copies (the plan serialises every run's settings
    for every job: issue 26)."""
    return _plain(obj)


def _plain(value: Any) -> Any:
    if isinstance(value, JSON_LEAVES):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {key if isinstance(key, str) else _json_key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


JSON_LEAVES = (str, int, float, bool, type(None))


def _json_key(key: Any) -> str:
    """A non-string key as JSON writes it (1 → "1", True → "true")."""
    if not isinstance(key, JSON_LEAVES):
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
    return next(iter(json.loads(json.dumps({key: 0}))))


def deep_merge(base: dict, override: dict) -> dict:
    """Recursively merge ``override`` into a copy of ``base`` (mappings merge, other values replace)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
