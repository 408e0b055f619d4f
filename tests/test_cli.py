"""The ``elf`` command's help: every stage listed, and each stage's example commands shown as written
(a module docstring that is not raw turns a shell line continuation into nothing, and the example's
lines run together)."""

import re
from pathlib import Path

import pytest

from elf.cli import STAGES, build_parser

STAGE_DIR = Path(__file__).resolve().parents[1] / "elf" / "stages"


def _help(stage: str) -> str:
    sub = next(a for a in build_parser((stage,))._actions if a.dest == "stage")
    return sub.choices[stage].format_help()


def test_elf_help_lists_every_stage():
    text = build_parser().format_help()
    assert all(re.search(rf"^\s+{stage}\b", text, re.M) for stage in STAGES)


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_help_shows_its_example_commands_line_by_line(stage):
    source = (STAGE_DIR / f"{stage}.py").read_text()
    doc = re.match(r'r?"""(.*?)"""', source, re.S).group(1)
    continued = [line.rstrip("\\").strip() for line in doc.splitlines() if line.endswith("\\")]
    shown = [line.strip() for line in _help(stage).splitlines()]
    assert f"usage: elf {stage}" in shown[0]
    for line in continued:
        assert f"{line} \\" in shown, f"elf {stage} --help runs this line into the next: {line[:80]}"
