"""The package's layers, read from its own imports: data flows one way, no import runs back up.

Every import of every ``elf`` module is read (module level and inside functions, ``ast.walk``), and
one from a lower layer to a higher one fails, naming both. The layer map, bottom to top:

    base      config, typed, schema, validate, io, errors, hub, precision, runtime, device, artifacts, plan:
              what every layer shares (settings, file output, the stage contracts, the DAG's plan)
    data      corpora, tokenizers, packing
    embed     encoders, embedding stores, batch readers
    train     the network and the flow (model, flow, decoder) and their training (train)
    evaluate  Gen. PPL, entropy, BLEU / ROUGE, seed aggregates
    report    figures, tables, review, manifest; the audit (reads every record, renders nothing)
    stages    the ``elf`` command and its subcommands, which wire the layers to files
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    ("base", ("elf", "elf.config", "elf.typed", "elf.schema", "elf.validate", "elf.io", "elf.errors",
              "elf.hub", "elf.precision", "elf.runtime", "elf.device", "elf.artifacts", "elf.plan")),
    ("data", ("elf.data",)),
    ("embed", ("elf.embed",)),
    ("train", ("elf.model", "elf.flow", "elf.decoder", "elf.train")),
    ("evaluate", ("elf.evaluate",)),
    ("report", ("elf.report", "elf.audit")),
    ("stages", ("elf.stages", "elf.cli", "elf.__main__")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((ROOT / "elf").rglob("*.py"))}


def layer_of(module: str) -> int:
    """The index of the most specific layer entry that ``module`` is, or lies under."""
    best, rank = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    if rank is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return rank


def imported(path: Path) -> set[str]:
    """The ``elf`` modules a file imports (``from elf.x import y`` counts ``elf.x.y`` when that is a
    module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "elf"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "elf":
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if f"{node.module}.{alias.name}" in MODULES}
    return found


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module):
    mine = layer_of(module)
    upward = sorted(f"{other} ({LAYERS[layer_of(other)][0]})" for other in imported(MODULES[module])
                    if layer_of(other) > mine)
    assert not upward, f"{module} ({LAYERS[mine][0]}) imports from a higher layer: {', '.join(upward)}"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The reading itself: a function-level import from a higher layer is found."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from elf.report import results\n    import elf.stages.train\n")
    assert {"elf.report", "elf.report.results", "elf.stages.train"} <= imported(path)
    assert layer_of("elf.report.results") > layer_of("elf.embed.store") > layer_of("elf.artifacts.names")


def test_no_module_over_500_lines():
    """One concern a module: none grows past 500 lines (split it by concern instead)."""
    long = sorted(f"{module} ({n} lines)" for module, path in MODULES.items()
                  if (n := len(path.read_text().splitlines())) > 500)
    assert not long, f"modules over 500 lines: {', '.join(long)}"
