"""The config's JSON schema (workflow/schemas/config.schema.yaml) is generated from elf/config.py's
dataclasses (`elf schema`), checked in equal to what they generate, and accepts what the parser
accepts while refusing what it refuses by shape (unknown keys, wrong types, out-of-range values)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from elf.cli import main as elf_main
from elf.config import ConfigError
from elf.validate import parse_experiment
from elf.schema import SCHEMA_PATH, config_schema, schema_text

ROOT = Path(__file__).resolve().parents[1]


def test_the_checked_in_schema_is_the_generated_one():
    assert (ROOT / SCHEMA_PATH).read_text() == schema_text(), \
        "workflow/schemas/config.schema.yaml is stale: run `elf schema`"


def test_elf_schema_writes_it(tmp_path):
    out = tmp_path / "schema.yaml"
    assert elf_main(["schema", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text()) == config_schema()


@pytest.mark.parametrize("name", ["config.yaml", "ci.yaml", "paper.yaml"])
def test_every_shipped_config_is_valid(name):
    jsonschema.validate(yaml.safe_load((ROOT / "config" / name).read_text()), config_schema())


@pytest.mark.parametrize("edit", [
    lambda c: c.update(no_such_key=1),                                  # unknown top-level key
    lambda c: c["evaluation"].update(n_samples="many"),                 # wrong type
    lambda c: c["evaluation"].update(seeds=[0, "one"]),                 # wrong item type
    lambda c: c.update(precision="fp16"),                               # not one of the choices
    lambda c: c["datasets"]["owt"].update(max_length=0),                # below its range
    lambda c: c["figures"]["F4"].pop("runs"),                           # a required key
])
def test_the_schema_refuses_what_the_parser_refuses(edit):
    config = copy.deepcopy(yaml.safe_load((ROOT / "config" / "ci.yaml").read_text()))
    edit(config)
    with pytest.raises(ConfigError):
        parse_experiment(config)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, config_schema())
