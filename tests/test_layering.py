"""docs/DESIGN.md's "may import" table, enforced by reading every module's imports (ast, nothing is executed).

| path     | may import                                                                          |
| planner/ | stdlib, kazoo, pandas, pyarrow, numpy, ortools; never airflow, never pyspark at module level |
  (plus kafka-python inside functions: the real-Kafka sandbox engine's client, pinned in pyproject.toml)
| planner/spark/ | the same, and pyspark at module level (the risk job); its settings module no pyspark |
  (the rest of planner/ imports planner.spark's Spark modules inside functions only, so importing the planner
  never loads pyspark)
| spark/   | planner's pure parts (never the CLI), pyspark                                       |
| dags/    | airflow, planner's facade (planner.api) and plan model only                          |
| plugins/ | airflow, planner's facade and plan model only (+ the web stack the plugin serves with) |

And no cycles: planner/'s import graph (every import statement: module level, inside functions, under
TYPE_CHECKING) has none, so each module can be read, tested and replaced from the ground floor up
(planner.requests, which imports nothing of the planner, holds the types every layer shares).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import deque
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


SPARK_PACKAGE = REPO / "planner" / "spark"
# pyspark-free modules of planner/spark/ (what validating a request and describing its spark-submit need)
SPARK_FREE = {SPARK_PACKAGE / "__init__.py", SPARK_PACKAGE / "settings.py", SPARK_PACKAGE / "jvms.py"}
# the spark-submit entry inside the package: run by spark-submit, never imported by the planner
SPARK_ENTRIES = {REPO / "planner" / "jobs" / "drain_risk.py"}


def test_planner_never_imports_airflow_nor_pyspark_at_module_level():
    """pyspark at module level only in planner/spark/ (the risk job, issue 23 item 3)."""
    bad = []
    for f in files("planner"):
        in_spark = f.parent == SPARK_PACKAGE and f not in SPARK_FREE
        for mod, top, line in imports(f):
            r = root(mod)
            where = f"{f.relative_to(REPO)}:{line} imports {mod}"
            if r == "airflow" or (r in FUNCTION_LEVEL_ONLY and top and not (r == "pyspark" and in_spark)):
                bad.append(where)
            elif r == "pyspark" and f in SPARK_FREE:
                bad.append(where + " (this module of planner/spark/ must work without Spark)")
            elif r not in STDLIB and r != "planner" and r not in PLANNER_THIRD_PARTY:
                bad.append(where + " (not in docs/DESIGN.md's list for planner/)")
    assert not bad, "\n".join(bad)



def test_only_the_spark_package_loads_the_spark_modules():
    """Outside planner/spark/ (and its spark-submit entry), the Spark modules are imported inside functions
    only, so no module of the planner loads pyspark when it is imported; the settings are pyspark-free."""
    bad = []
    for f in files("planner"):
        if f.parent == SPARK_PACKAGE or f in SPARK_ENTRIES:
            continue
        for mod, top, line in imports(f):
            if top and mod.startswith("planner.spark") and mod not in {"planner.spark", "planner.spark.settings"}:
                bad.append(f"{f.relative_to(REPO)}:{line} imports {mod} at module level")
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


# The planner's run-folder layout: which file makes a step's folder complete, where its records are. The Airflow
# layer asks planner.api (RunFolder.complete / manifest / risk_summary / progress / outcome, step_complete,
# read_plan) and never names these files itself, so the layout can change in one place (issue 23 item 4).
LAYOUT_FILES = re.compile(r"\b(manifest|summary|plan|progress|outcome)\.json\b")


def layout_names(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of every line of the file that names one of LAYOUT_FILES."""
    return [(i, line.strip()) for i, line in enumerate(path.read_text().splitlines(), 1) if LAYOUT_FILES.search(line)]


def test_the_layout_rule_sees_what_it_must(tmp_path):
    f = tmp_path / "op.py"
    f.write_text('if (run.plan / "plan.json").is_file():\n    m = read(run.snapshot / "manifest.json")\n'
                 'x = f"{final}/summary.json"\n@app.get("/progress", name="progress_json")\nrun.complete("plan")\n')
    assert layout_names(f) == [(1, 'if (run.plan / "plan.json").is_file():'),
                               (2, 'm = read(run.snapshot / "manifest.json")'), (3, 'x = f"{final}/summary.json"')]


@pytest.mark.parametrize("folder", ["dags", "plugins"])
def test_dags_and_plugins_never_name_the_run_folders_files(folder):
    found = [f"{f.relative_to(REPO)}:{i}: {line}" for f in sorted((REPO / folder).rglob("*"))
             if f.suffix in (".py", ".html", ".js") and "__pycache__" not in f.parts for i, line in layout_names(f)]
    assert not found, "the Airflow layer names the planner's files (use planner.api's run-folder readers):\n" + \
        "\n".join(found)


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


# ----------------------------------------------------------------------------------------- no cycles
def modules(top: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package folder `top` (a package is its __init__)."""
    out = {}
    for p in sorted(top.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = p.relative_to(top.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def import_graph(top: Path) -> dict[str, dict[str, int]]:
    """module -> {module of the same package it imports: line}, from every import statement in the file, at
    any depth (module level, in functions, under TYPE_CHECKING). `from a.b import c` is an import of a.b.c
    when that is a module, else of a.b; relative imports are resolved against the importing module."""
    mods = modules(top)
    pkg = top.name

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for mod, path in mods.items():
        edges: dict[str, int] = {}
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for name in names:
                if name == pkg or name.startswith(pkg + "."):
                    target = known(name)
                    if target and target != mod:
                        edges.setdefault(target, node.lineno)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle (a, b, ..., a) through each module that is on one, each cycle reported once."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    for start in sorted(graph):
        back: dict[str, str] = {}
        queue = deque([start])
        while queue:
            m = queue.popleft()
            if start in graph[m]:
                path = [m]
                while path[-1] != start:
                    path.append(back[path[-1]])
                cycle = [start, *reversed(path[:-1]), start]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    found.append(cycle)
                break
            for n in sorted(graph[m]):
                if n not in back and n != start:
                    back[n] = m
                    queue.append(n)
    return found


def test_the_cycle_finder_sees_what_it_must(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "ground.py").write_text("import os\n")
    (pkg / "a.py").write_text("from pkg import ground\nfrom pkg.b import thing\n")
    (pkg / "b.py").write_text("from pkg.ground import x\ndef f():\n    from pkg import a\n")      # in a function
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.d import T\n")
    (pkg / "sub" / "d.py").write_text("from .. import c\n")                                       # relative
    (pkg / "sub" / "e.py").write_text("from pkg.ground import y\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.ground": 1, "pkg.b": 2}
    assert graph["pkg.sub.d"] == {"pkg.c": 1}
    assert sorted(cycles(graph)) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.c", "pkg.sub.d", "pkg.c"]]
    (pkg / "b.py").write_text("from pkg.ground import x\n")
    (pkg / "sub" / "d.py").write_text("from pkg import ground\n")
    assert cycles(import_graph(pkg)) == []


def test_planner_has_no_import_cycles():
    graph = import_graph(REPO / "planner")
    found = cycles(graph)
    text = ["  " + " -> ".join(f"{m} (line {graph[m][n]})" for m, n in zip(c, c[1:], strict=False)) + f" -> {c[-1]}"
            for c in found]
    assert not found, f"{len(found)} import cycle(s) in planner/:\n" + "\n".join(text)


def test_the_requests_are_the_ground_floor():
    """Every layer takes the requests as they are, so they import nothing of the planner (types only, for
    annotations) and the facade re-exports them."""
    graph = import_graph(REPO / "planner")
    assert not graph["planner.requests"].keys() - {"planner.errors", "planner.kafka_admin", "planner.plan_model"}, \
        graph["planner.requests"]
    api = ast.parse((REPO / "planner" / "api.py").read_text())
    exported = {a.name for n in api.body if isinstance(n, ast.ImportFrom) and n.module == "planner.requests"
                for a in n.names}
    req = ast.parse((REPO / "planner" / "requests.py").read_text())
    defined = {n.name for n in req.body if isinstance(n, ast.ClassDef)}
    assert defined and defined <= exported, defined - exported


MAX_FUNCTION_LINES = 80


def test_no_function_in_execution_is_over_80_lines():
    """Issue 23: the execution package stays readable in pieces (a function, decorators and docstring included,
    of at most 80 lines). The count is the function's own span in the file."""
    long = []
    for path in files("planner/execution"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - first + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "functions over 80 lines in planner/execution/:\n" + "\n".join(long)


STATE_KEYS = {"state", "phase"}
STATE_OWNERS = {"planner/execution/runrecord.py", "planner/execution/rollrecord.py"}


def test_only_the_record_modules_change_an_execution_state():
    """Issue 23: a run's, a unit's or a roll step's state changes only through the transition tables
    (runrecord.py, rollrecord.py), as Cruise Control's ExecutionTask does: no other module of planner/execution/
    assigns a `state` / `phase` attribute or key."""
    found = []
    for path in files("planner/execution"):
        rel = str(path.relative_to(REPO))
        if rel in STATE_OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            for t in targets:
                for sub in ast.walk(t):
                    key = sub.attr if isinstance(sub, ast.Attribute) else \
                        sub.slice.value if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) \
                        else None
                    if key in STATE_KEYS:
                        found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:90]}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
                keys = [k.value for k in getattr(node.args[0], "keys", []) if isinstance(k, ast.Constant)] \
                    if node.args else []
                if STATE_KEYS & set(keys) or STATE_KEYS & {kw.arg for kw in node.keywords}:
                    found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:90]}")
    assert not found, "execution states changed outside the transition tables:\n" + "\n".join(found)


# ------------------------------------------------------------------------- the library words no command line
# Library messages state facts; the CLI words what to do as command lines and flags, the Airflow layer as tasks
# and params (planner/errors.py). A message that says "run `kplan apply`" or "pass --throttle" reaches an Airflow
# user as advice they cannot follow. The presenters are exempt: the CLI itself, the demo, the sandbox tool (a
# command of its own) and the argument parsers; so is risk.py's report text (issue 23 item 3 moves it).
CLI_WORDS = re.compile(r"`kplan [a-z]|\bkplan (apply|cancel|verify|roll|plan|brokers|maintenance|snapshot|risk|"
                       r"sandbox)\b|(?:^|[\s(`\[])--[a-z][a-z-]+")
PRESENTERS = ("planner/cli.py", "planner/demo.py", "planner/commands/", "planner/sandbox/", "planner/risk_args.py",
              "planner/risk.py", "planner/risk_job.py")


def message_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string the module builds, f-strings joined ({} for their values), except
    docstrings, argparse help= texts and single words (an argv element such as '--bootstrap-server' for Kafka's
    tools is a command line being run, not advice)."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(n, ast.keyword) and n.arg == "help":
            skip.update(id(m) for m in ast.walk(n.value))
        if isinstance(n, ast.JoinedStr):
            skip.update(id(v) for v in n.values)
    out = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            text = n.value
        else:
            continue
        if " " in text.strip() and ".sh " not in text:   # kafka-log-dirs.sh --describe: Kafka's tool, by name
            out.append((n.lineno, text))
    return out


def cli_words(path: Path) -> list[tuple[int, str]]:
    return sorted((line, text) for line, text in message_strings(path) if CLI_WORDS.search(text))


def test_the_cli_words_finder_sees_what_it_must(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Run `kplan apply` again (a docstring: fine)."""\n'
                 'def f(p, n):\n'
                 '    raise E(f"{p} is a restart plan: run it with `kplan roll --zk … --plan {p}`")\n'
                 'A = "apply it with a lower --max-concurrent-per-broker"\n'
                 'B = ["kafka-topics.sh", "--bootstrap-server", "b:9092"]\n'
                 'C = "partitions from kafka-log-dirs.sh --describe output"\n'
                 'D = "a lower max_concurrent_per_broker"\n'
                 'E = "look again (kplan brokers shows the states)"\n')
    assert [line for line, _ in cli_words(f)] == [3, 4, 8]


def test_library_messages_word_no_command_line():
    found = [f"{f.relative_to(REPO)}:{line}: {text[:120]}" for f in files("planner")
             if not str(f.relative_to(REPO)).startswith(PRESENTERS) for line, text in cli_words(f)]
    assert not found, "library messages that tell the user a CLI command or flag (carry errors.NextStep data, name " \
        "the request's field, or give the error a type the presenters word):\n" + "\n".join(found)


def test_every_next_step_and_option_is_worded_by_both_presenters():
    """Each step a NextStep may name has the CLI's command line and the Airflow layer's words; every option
    phrase the CLI turns into a flag is one the library really says (a stale entry would hide a change)."""
    from planner.commands._zkargs import OPTIONS, command
    from planner.errors import STEPS, NextStep

    args = type("Args", (), {"zk": "zk:2181", "plan": "P"})()
    assert all("kplan " in command(NextStep(s, "does", (4,)), args) for s in STEPS)
    tree = ast.parse((REPO / "plugins" / "kplan_airflow" / "operators.py").read_text())
    worded = next(ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "_STEP" for t in n.targets))
    assert set(worded) == set(STEPS)
    used = {ast.literal_eval(n.args[0]) for f in files("planner") for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "NextStep" and n.args
            and isinstance(n.args[0], ast.Constant)}
    assert used <= set(STEPS), used - set(STEPS)
    said = "\n".join(t for f in files("planner") if not str(f.relative_to(REPO)).startswith(PRESENTERS)
                     for _, t in message_strings(f))
    assert [k for k in OPTIONS if k not in said.replace('\\"', '"')] == []
