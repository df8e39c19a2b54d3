"""DESIGN.md's "may import" table, enforced by reading every module's imports (ast, nothing is executed).

| path     | may import                                                                          |
| planner/ | stdlib, kazoo, pandas, pyarrow, numpy, ortools; never airflow, never pyspark at module level |
  (plus kafka-python inside functions: the real-Kafka sandbox engine's client, pinned in pyproject.toml)
| spark/   | planner's pure parts (never the CLI), pyspark                                       |
| dags/    | airflow, planner's facade (planner.api) and plan model only                          |
| plugins/ | airflow, planner's facade and plan model only (+ the web stack the plugin serves with) |
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
PLANNER_THIRD_PARTY = {"kazoo", "pandas", "pyarrow", "numpy", "ortools", "pyspark", "kafka"}
# Loaded only where a step needs them, never on import: Spark, and kafka-python (the client the real-Kafka
# sandbox engine produces test data with).
FUNCTION_LEVEL_ONLY = {"pyspark", "kafka"}
FACADE = {"planner", "planner.api", "planner.plan_model"}


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """(module, at module level, line) for every import in the file. Module level: executed on import,
    i.e. not inside a function, and not under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, False)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(ast.Module(body=child.orelse, type_ignores=[]), top)
            elif isinstance(child, ast.Import):
                out.extend((a.name, top, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:   # relative import: inside the same package
                    continue
                mod = child.module or ""
                out.extend((mod if mod != "planner" else f"planner.{a.name}", top, child.lineno) for a in child.names)
            else:
                visit(child, top)

    visit(tree, True)
    return out


def files(folder: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


def root(mod: str) -> str:
    return mod.split(".")[0]


def test_the_checker_sees_what_it_must(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pyspark\n"
                 "try:\n    import airflow.sdk\nexcept ImportError:\n    pass\n"
                 "def g():\n    from pyspark.sql import functions\nfrom planner import api\n")
    got = {(m, top) for m, top, _ in imports(f)}
    assert got == {("os", True), ("typing", True), ("airflow.sdk", True), ("pyspark.sql", False),
                   ("planner.api", True)}


def test_planner_never_imports_airflow_nor_pyspark_at_module_level():
    bad = []
    for f in files("planner"):
        for mod, top, line in imports(f):
            r = root(mod)
            where = f"{f.relative_to(REPO)}:{line} imports {mod}"
            if r == "airflow" or (r in FUNCTION_LEVEL_ONLY and top):
                bad.append(where)
            elif r not in STDLIB and r != "planner" and r not in PLANNER_THIRD_PARTY:
                bad.append(where + " (not in DESIGN.md's list for planner/)")
    assert not bad, "\n".join(bad)


def test_spark_jobs_import_the_package_never_the_cli():
    assert files("spark"), "spark/ holds the spark-submit entry"
    for f in files("spark"):
        for mod, _, line in imports(f):
            assert not mod.startswith(("planner.cli", "planner.commands")), f"{f}:{line} imports {mod}"
            assert root(mod) in STDLIB | {"planner", "pyspark"}, f"{f}:{line} imports {mod}"


@pytest.mark.parametrize("folder", ["dags", "plugins"])
def test_dags_and_plugins_use_only_the_facade(folder):
    for f in files(folder):
        for mod, _, line in imports(f):
            if root(mod) == "planner":
                assert mod in FACADE or mod.startswith("planner.api."), \
                    f"{f.relative_to(REPO)}:{line} imports {mod}: use planner.api (or planner.plan_model)"


def test_the_library_logs_and_never_prints():
    """Only the command line presents (planner/commands, cli, demo, and the `main` of entry modules)."""
    presenting = {REPO / "planner" / "cli.py", REPO / "planner" / "demo.py"}
    bad = []
    for f in files("planner"):
        if f in presenting or "commands" in f.relative_to(REPO).parts:
            continue
        tree = ast.parse(f.read_text(), str(f))
        # an entry point's main (spark-submit, the sandbox daemon) is a command line
        mains = {id(n) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and fn.name == "main"
                 for n in ast.walk(fn)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" \
                    and id(node) not in mains:
                bad.append(f"{f.relative_to(REPO)}:{node.lineno}")
    assert not bad, "library code prints (log instead): " + ", ".join(bad)
