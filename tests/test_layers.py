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
    stages    the subcommands, which wire the layers to files
    command   the ``elf`` command, which loads the stage named on its command line

The imports are read by ``elf.deps`` (the reading that gives each rule its code files): statements at
module level and inside functions, relative imports and ``importlib.import_module`` (the command's
dispatch to every stage, the report registry's templates), and the graph they make has no cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from elf import deps

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    ("base", ("elf", "elf.config", "elf.typed", "elf.schema", "elf.validate", "elf.io", "elf.errors",
              "elf.hub", "elf.precision", "elf.runtime", "elf.device", "elf.artifacts", "elf.plan",
              "elf.methods", "elf.deps")),
    ("data", ("elf.data",)),
    ("embed", ("elf.embed",)),
    ("train", ("elf.model", "elf.flow", "elf.decoder", "elf.train")),
    ("evaluate", ("elf.evaluate",)),
    ("report", ("elf.report", "elf.audit")),
    ("stages", ("elf.stages",)),
    ("command", ("elf.cli", "elf.__main__")),
]


MODULES = deps.package_modules()


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


def imported(path: Path, module: str | None = None) -> set[str]:
    return deps.imported(path, module or deps.module_name(path), MODULES)


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
    path.write_text("def f():\n    from elf.report import results\n    import elf.stages.train\n"
                    "    import importlib\n    importlib.import_module(f'elf.flow.{name}')\n")
    assert {"elf.report", "elf.report.results", "elf.stages.train", "elf.flow.samplers"} <= \
        imported(path, "elf.probe")
    assert layer_of("elf.report.results") > layer_of("elf.embed.store") > layer_of("elf.artifacts.names")


def test_no_module_over_500_lines():
    """One concern a module: none grows past 500 lines (split it by concern instead)."""
    long = sorted(f"{module} ({n} lines)" for module, path in MODULES.items()
                  if (n := len(path.read_text().splitlines())) > 500)
    assert not long, f"modules over 500 lines: {', '.join(long)}"



def test_the_imports_make_no_cycle():
    """No module can reach itself through imports (the lazy and ``importlib`` ones included)."""
    graph = {module: imported(path, module) for module, path in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for other in sorted(graph[module]):
            if state.get(other) == 1:
                cycle = path[path.index(other):] + [module, other] if other in path else [module, other]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if other not in state:
                visit(other, path + [module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
