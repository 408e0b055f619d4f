"""environment.yml, the rules' workflow/envs/elf.yaml and pyproject.toml pin the same packages at the same
versions; the rules' environment holds no `-e .` (under `--sdm conda` Snakemake builds it from its own
copy, where `.` is not this checkout: the rules find elf/ through PYTHONPATH instead)."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines):
    return dict(line.split("==") for line in lines if "==" in line)


def _pip(path):
    env = yaml.safe_load((ROOT / path).read_text())
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))


def test_environment_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _pins(project["dependencies"] + project["optional-dependencies"]["test"])
    assert _pins(_pip("environment.yml")) == declared


def test_the_rules_environment_is_the_dependencies_without_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip = _pip("workflow/envs/elf.yaml")
    assert _pins(pip) == _pins(project["dependencies"])
    assert not [line for line in pip if "==" not in line], "only pinned packages: no `-e .`, no paths"
