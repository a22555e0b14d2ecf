"""House rules a reader relies on: no import cycles between modules, one atomic-write implementation."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from conftest import REPO
from lightenv import light_core_script

SOURCES = list(light_core_script().package_modules(REPO).values())


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_import_cycles_between_modules():
    """On the graph of imports anywhere (function-level ones included) that also defines the light core."""
    assert cycles(light_core_script().import_graph(REPO)) == []


def test_atomic_writes_have_one_implementation():
    """Publishing a file by temp file + rename is evalwf.common.atomic's job (fsync, umask, naming the file on
    ENOSPC); nobody else hand-writes it."""
    offenders = []
    for path in SOURCES:
        rel = path.relative_to(REPO)
        if rel == Path("evalwf/common/atomic.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            named_os = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "os"
            if named_os and func.attr in ("replace", "rename"):
                offenders.append(f"{rel}:{node.lineno}: os.{func.attr}")
    assert not offenders, "\n".join(offenders)


def test_no_dead_names():
    """Every module-level name (and method) of the framework and the benchmarks is used by the project itself,
    not only by its tests."""

    used_in = [
        *SOURCES,
        *(REPO / "scripts").glob("*.py"),
        *(REPO / "workflow").rglob("*.smk"),
        REPO / "workflow" / "Snakefile",
        *(REPO / "snakemake_executor_plugin_labtasker").glob("*.py"),
    ]
    text = "\n".join(path.read_text(encoding="utf-8") for path in used_in)
    # how often each word stands in the text: the count of `\bname\b` matches, for every name at once (one regex
    # search per name over all the sources took most of this test's 25 s)
    words = Counter(re.findall(r"\w+", text))
    overrides = {"find_class", "persistent_load", "Adapter", "emit", "main"}  # pickle / registry / logging / python -m
    dead = []
    for path in SOURCES:
        rel = path.relative_to(REPO)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = []
        for node in tree.body:
            if isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.append(node.target.id)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.append(node.name)
                if isinstance(node, ast.ClassDef):
                    names += [
                        m.name for m in node.body if isinstance(m, ast.FunctionDef) and not m.name.startswith("__")
                    ]
        for name in set(names) - overrides:
            if name.startswith("__") or words[name] > 1:
                continue
            dead.append(f"{rel}: {name}")
    assert not dead, "\n".join(sorted(dead))


def test_source_says_why_not_which_issue():
    """Comments and docstrings explain the reason; the history of which issue asked for it is in git."""
    pattern = re.compile(r"issue [0-9]", re.IGNORECASE)
    text_suffixes = (".py", ".smk", ".md", ".yaml", ".sh", "")
    roots = ("benchmarks", "evalwf", "snakemake_executor_plugin_labtasker", "workflow", "tests", "scripts")
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for root in roots
        for path in sorted((REPO / root).rglob("*"))
        if path.is_file() and path.suffix in text_suffixes and "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found
