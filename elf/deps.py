"""The ``elf/`` source files a stage runs, read from the imports (nothing is imported to find them).

A rule's jobs declare these files as inputs (``code(stage)`` in ``workflow/rules/common.smk``), so
editing a module reruns exactly the jobs whose stage imports it, and what reads their outputs.
``stage_files("train")`` is the closure of ``elf.__main__``, ``elf.cli`` and ``elf.stages.train``
over every import this module can see:

- ``import elf.embed.store`` and ``from elf.embed import store`` (a module when ``store`` is one), relative
  imports, at module level and inside functions (``ast.walk``: the lazy imports that keep a job's
  start-up light run when the job does);
- ``importlib.import_module("elf.plan")``, and ``importlib.import_module(f"elf.report.{name}")``: an
  f-string's constant head names a package, and every module under it counts but the importer
  itself (the report's templates, loaded by the name its registry gives);
- the packages above each module (importing ``elf.embed.store`` runs ``elf/__init__.py`` and
  ``elf/embed/__init__.py``).

The command's own dispatch, ``importlib.import_module(f"elf.stages.{name}")`` in ``elf.cli``, is not
followed: the stage a job runs is its root, and a job runs no other stage unless that stage imports it.

The rules read these files through one digest per stage (``digest_text``, written by the
``code_digest`` rule to ``R/code/{stage}.sha256``): a changed file rewrites its stages' digests, and
the digest's newer file reruns their jobs. A comment-only edit reruns the jobs too: a file's bytes
are what Snakemake compares, and a missed rerun (a stale number) costs more than a redundant one.
``tests/test_workflow.py`` edits every module in turn and checks that ``snakemake -n`` plans what this
closure says.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ENTRY_MODULES = ("elf.__main__", "elf.cli")
DISPATCH_PREFIX = "elf.stages."  # elf.cli loads the stage named on the command line: the job's root


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """``elf/embed/store.py`` → ``elf.embed.store``; ``elf/embed/__init__.py`` → ``elf.embed``."""
    parts = (package_dir.name, *path.relative_to(package_dir).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def package_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def _dynamic_target(call: ast.Call) -> tuple[str, bool] | None:
    """``importlib.import_module(<name>)``: (the name, exact) or (the f-string's constant head,
    False)."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called != "import_module" or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value, True
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value), False
    return None


def read_imports(path: Path, module: str, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The package modules a file imports: (by ``import`` statements, lazy and relative ones
    included; by ``importlib.import_module``). Each file is read once per process."""
    return _read_imports(path, module, tuple(sorted(modules)))


@lru_cache(maxsize=None)
def _read_imports(path: Path, module: str, names: tuple[str, ...]) -> tuple[frozenset, frozenset]:
    modules = set(names)
    root = module.split(".")[0]
    is_package = path.name == "__init__.py"
    static: set[str] = set()
    dynamic: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            static.update(alias.name for alias in node.names if alias.name.split(".")[0] == root)
        elif isinstance(node, ast.ImportFrom):
            name = (_resolve_relative(module, is_package, node.level, node.module) if node.level
                    else node.module)
            if name and name.split(".")[0] == root:
                static.add(name)
                static.update(f"{name}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and (target := _dynamic_target(node)):
            name, exact = target
            if name.split(".")[0] == root:
                dynamic.update([name] if exact else (m for m in modules if m.startswith(name)))
    return frozenset(static & modules), frozenset((dynamic & modules) - {module})


def imported(path: Path, module: str | None = None, modules: dict[str, Path] | None = None) -> set[str]:
    """Every package module a file imports, by statement or by ``importlib`` (the layer and cycle
    tests read these)."""
    modules = package_modules() if modules is None else modules
    module = module or next(name for name, p in modules.items() if p == path)
    return set().union(*read_imports(path, module, modules))


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def closure(roots: tuple[str, ...], package_dir: Path = PACKAGE_DIR) -> set[str]:
    """Every module that importing ``roots`` can run (parent packages included)."""
    modules = package_modules(package_dir)
    missing = [r for r in roots if r not in modules]
    if missing:
        raise KeyError(f"no module {', '.join(missing)} under {package_dir}")
    seen: set[str] = set()
    todo = [parent for root in roots for parent in _with_parents(root)]
    while todo:
        name = todo.pop()
        if name in seen or name not in modules:
            continue
        seen.add(name)
        static, dynamic = read_imports(modules[name], name, modules)
        if name in ENTRY_MODULES:  # the dispatch: the stage a job runs is its root
            dynamic = {other for other in dynamic if not other.startswith(DISPATCH_PREFIX)}
        for other in static | dynamic:
            todo.extend(_with_parents(other))
    return seen


def stage_modules(stage: str) -> set[str]:
    """The modules the job of ``elf <stage>`` runs."""
    return closure((*ENTRY_MODULES, f"{DISPATCH_PREFIX}{stage}"))


def stage_files(stage: str) -> list[Path]:
    """The files of ``stage_modules(stage)``, sorted: a rule's code inputs."""
    modules = package_modules()
    return sorted(modules[name] for name in stage_modules(stage))


def digest_text(paths: list[str | Path]) -> str:
    """``sha256  elf/<file>`` per line: a stage's code digest (``R/code/{stage}.sha256``), the one
    code input of its jobs. Planning reads one file a job instead of the ~45 of its closure
    (issue 26: at 10,000 runs the per-file work was most of ``snakemake -n``)."""
    from elf.artifacts import file_sha256

    root = PACKAGE_DIR.parent
    lines = []
    for path in sorted(Path(p).resolve() for p in paths):
        name = path.relative_to(root) if path.is_relative_to(root) else path
        lines.append(f"{file_sha256(path)}  {name}\n")
    return "".join(lines)
