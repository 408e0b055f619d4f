"""Every docstring points at things that exist: repository paths, dotted ``elf`` names, ``elf <stage>``.

Read from the sources (``ast``; nothing imported but the stage list): module, class and function
docstrings of elf/, tests/ and benchmarks/. Outputs of a run (``reports/``, ``results/``) and
placeholders (``<run>``, ``{fid}``, ``*``) are not checked.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from elf import deps
from elf.cli import STAGES

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("elf", "tests", "benchmarks", "config", "workflow", "docs", "slurm", "tpu", ".ci")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\w)(?![\w<>{}*])" % "|".join(re.escape(d) for d in SOURCE_DIRS))
DOTTED = re.compile(r"(?<![\w./-])(elf(?:\.\w+)+)(?!\.(?:py|yaml)\b)")
COMMAND = re.compile(r"(?:``|`|\$ |^\s*)elf ([a-z][a-z_]*)\b", flags=re.M)
PLACEHOLDER = re.compile(r"[<>{}*]")


def docstrings(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc


def top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def path_exists(ref: str) -> bool:
    ref = ref.rstrip(".")
    if (ROOT / ref).exists():
        return True
    stem, _, attr = ref.rpartition(".")  # benchmarks/bench_train.make_step
    return bool(attr) and (ROOT / f"{stem}.py").exists() and attr in top_level_names(ROOT / f"{stem}.py")


def name_exists(dotted: str, modules: dict[str, Path]) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in modules:
            rest = parts[cut:]
            return not rest or rest[0] in top_level_names(modules[module]) or \
                f"{module}.{rest[0]}" in modules
    return False


def broken_references(path: Path, modules: dict[str, Path]) -> list[str]:
    broken = []
    for doc in docstrings(path):
        broken += [ref for ref in PATH.findall(doc) if not PLACEHOLDER.search(ref) and not path_exists(ref)]
        broken += [ref for ref in DOTTED.findall(doc) if not name_exists(ref.rstrip("."), modules)]
        broken += [f"elf {cmd}" for cmd in COMMAND.findall(doc) if cmd not in STAGES]
    return broken


def test_no_docstring_names_a_missing_path_module_or_stage():
    modules = deps.package_modules()
    files = [p for d in ("elf", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    broken = {str(p.relative_to(ROOT)): refs for p in files if (refs := broken_references(p, modules))}
    assert not broken, f"docstrings name what does not exist: {broken}"


def test_the_checker_finds_each_kind_of_broken_reference(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""See tests/test_nothing_here.py, ``elf.config.no_such_name``, ``elf settings``;\n'
                     'but tests/test_layers.py, elf.config.ConfigError, ``elf train`` and '
                     'results/runs/<run> are fine."""\n')
    assert broken_references(probe, deps.package_modules()) == [
        "tests/test_nothing_here.py", "elf.config.no_such_name", "elf settings"]
