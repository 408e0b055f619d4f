"""A stage's code files come from its imports (elf/deps.py), and every rule declares its stage's.

The reading on a small package written here (each kind of import, and the dispatch that is not
followed); each rule's ``code(stage)`` against the stage its shell command runs. That an edit to any
module plans exactly the jobs whose stage imports it is checked on the CI DAG in test_workflow.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elf import deps

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "workflow" / "rules"


def write_package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "elf"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_closure_follows_every_kind_of_import(tmp_path):
    package = write_package(tmp_path, {
        "cli.py": "import importlib\n"
                  "def main(name):\n    importlib.import_module(f'elf.stages.{name}')\n",
        "__main__.py": "from elf.cli import main\n",
        "stages/__init__.py": "",
        "stages/a.py": "from . import helper\n"
                       "def run():\n    from elf.lazy import thing\n"
                       "    import importlib\n    importlib.import_module('elf.named')\n",
        "stages/b.py": "",
        "stages/helper.py": "from ..report import registry\n",
        "lazy.py": "thing = 1\n",
        "named.py": "",
        "report/__init__.py": "",
        "report/registry.py": "import importlib\n"
                              "def draw(m):\n    return importlib.import_module(f'elf.report.{m}')\n",
        "report/template_one.py": "import elf.deep.leaf\n",
        "deep/__init__.py": "",
        "deep/leaf.py": "",
        "unused.py": "",
    })
    got = deps.closure(("elf.__main__", "elf.cli", "elf.stages.a"), package)
    assert got == {"elf", "elf.__main__", "elf.cli", "elf.stages", "elf.stages.a", "elf.stages.helper",
                   "elf.lazy", "elf.named", "elf.report", "elf.report.registry",
                   "elf.report.template_one", "elf.deep", "elf.deep.leaf"}
    # the command's dispatch loads only the stage a job runs: b is not part of a's job
    assert "elf.stages.b" not in got and "elf.unused" not in got


def test_an_unknown_root_is_named(tmp_path):
    package = write_package(tmp_path, {})
    with pytest.raises(KeyError, match="elf.stages.nope"):
        deps.closure(("elf.stages.nope",), package)


def test_a_stage_runs_what_it_imports_and_nothing_it_does_not():
    train = deps.stage_modules("train")
    assert {"elf.train.loop", "elf.embed.reader", "elf.model", "elf.stages.train"} <= train
    assert not {"elf.train.decoder", "elf.report.review", "elf.stages.evaluate"} & train
    assert "elf.train.decoder" in deps.stage_modules("decoder")
    # the report's templates are loaded by name from its registry
    assert {"elf.report.templates", "elf.report.tables", "elf.report.config_tables"} <= \
        deps.stage_modules("report")


def rule_blocks() -> dict[str, str]:
    blocks = {}
    for path in sorted(RULES.glob("*.smk")):
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |^ruleorder|\Z)", path.read_text(),
                                 flags=re.M | re.S):
            blocks[match.group(1)] = match.group(2)
    return blocks


def test_each_rule_declares_the_code_of_the_stage_it_runs():
    checked = 0
    for rule, body in rule_blocks().items():
        shell = body.split("shell:", 1)[-1]
        stages = set(re.findall(r'(?:\belf|\{params\.launch\}) ([a-z]+) ', shell))
        declared = set(re.findall(r'\bcode\("([a-z]+)"\)', body))
        assert declared == stages, f"rule {rule} runs elf {stages or '(nothing)'} but declares {declared}"
        checked += bool(stages)
    assert checked >= 15
