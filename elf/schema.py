"""The JSON schema of the configuration, generated from the dataclasses of ``elf.config``.

``config_schema()`` walks ``Experiment`` and its nested settings: each field's type (mappings,
lists, literals, optionals), its description and numeric range (``elf.typed.setting``) and its
default. ``elf schema`` writes it to ``workflow/schemas/config.schema.yaml``, which the workflow hands
to Snakemake's ``validate(config, schema)``; ``tests/test_schema.py`` keeps the checked-in file equal to
the generated one. The schema describes the shape; ``elf.validate`` adds the cross-field rules and the
messages that name the key, the value and what is allowed (it runs first).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from elf.config import Experiment

SCHEMA_PATH = Path("workflow") / "schemas" / "config.schema.yaml"
SCALARS = {int: "integer", float: "number", bool: "boolean", str: "string", type(None): "null"}
HEADER = ("# Generated from elf/config.py by `elf schema`; do not edit (tests/test_schema.py checks it).\n"
          "# Snakemake validates every config against it (workflow/rules/common.smk).\n")


def type_schema(tp: Any) -> dict:
    """The JSON schema of one annotation."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [type_schema(arg) for arg in get_args(tp)]}
    if origin is Literal:
        return {"enum": list(get_args(tp))}
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        return {"type": "array", "prefixItems": [type_schema(a) for a in args], "items": False,
                "minItems": len(args)}
    if origin is dict:
        return {"type": "object", "additionalProperties": type_schema(get_args(tp)[1])}
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp):
        return dataclass_schema(tp)
    return {"type": SCALARS[tp]}


def _default(fld: dataclasses.Field) -> Any:
    if fld.default is not dataclasses.MISSING:
        value = fld.default
    elif fld.default_factory is not dataclasses.MISSING:
        value = fld.default_factory()
    else:
        return dataclasses.MISSING
    if dataclasses.is_dataclass(value):
        return dataclasses.MISSING  # a nested section: its own fields say their defaults
    return list(value) if isinstance(value, tuple) else value


def field_schema(fld: dataclasses.Field, tp: Any) -> dict:
    schema = {"description": fld.metadata["help"]} if fld.metadata.get("help") else {}
    schema.update(type_schema(tp))
    lo, hi = fld.metadata.get("lo"), fld.metadata.get("hi")
    if lo is not None:
        schema["exclusiveMinimum" if fld.metadata.get("lo_open") else "minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    default = _default(fld)
    if default is not dataclasses.MISSING:
        schema["default"] = default
    return schema


def dataclass_schema(cls) -> dict:
    """An object with exactly the dataclass's fields; those without a default required."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    schema = {"type": "object", "description": (cls.__doc__ or cls.__name__).strip().splitlines()[0],
              "properties": {f.name: field_schema(f, hints[f.name]) for f in fields},
              "additionalProperties": False}
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if required:
        schema["required"] = required
    return schema


def config_schema() -> dict:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ELF experiment configuration",
            **dataclass_schema(Experiment)}


def schema_text() -> str:
    return HEADER + yaml.safe_dump(config_schema(), sort_keys=False, width=100, allow_unicode=True)
