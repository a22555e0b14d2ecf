"""Every part imports only what docs/architecture.md's diagram lets it reach, and the plugin meets the framework
only in evalwf.contract and evalwf.queue, so a worker, `status` or a simulator's own interpreter (no Snakemake
there) can import what it needs. The diagram is read from the document itself: the picture and this test cannot
drift apart."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PLUGIN = "snakemake_executor_plugin_labtasker"
ARCHITECTURE = REPO / "docs" / "architecture.md"
# scripts/bench_scheduling.py and bench_queue_ceiling.py benchmark the plugin itself (they measure its StatusPoller's
# rounds): a benchmark of the plugin may import the plugin. Nothing else under scripts/ may.
PLUGIN_BENCHMARK_SCRIPTS = {"scripts/bench_scheduling.py", "scripts/bench_queue_ceiling.py"}
# The parts a simulator's interpreter loads: neither Snakemake nor Labtasker may be imported there.
LIGHT_PARTS = {"common", "contract", "policy", "benchmark", "plan", "job", "benchmarks", "registry"}
# The one module of a heavy part that imports Snakemake: a spare job step that has it imported already.
SNAKEMAKE_IMPORTERS = {"evalwf/worker/warm_step.py"}
EDGE = re.compile(r"^\s*(\w+)\s*-\.?->\s*(\w+)\s*$")
SMK_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w.]+))", re.MULTILINE)


def diagram_edges(text: str) -> set[tuple[str, str]]:
    """The arrows of the ```mermaid block marked `%% parts` in docs/architecture.md."""
    block = re.search(r"```mermaid\n%% parts[^\n]*\n(.*?)```", text, re.DOTALL)
    assert block, "docs/architecture.md has no ```mermaid block starting with '%% parts'"
    return {(m.group(1), m.group(2)) for line in block.group(1).splitlines() if (m := EDGE.match(line))}


def reachable(edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    """Each node and every node its arrows reach (itself included)."""
    nodes = {n for edge in edges for n in edge}
    reach = {n: {n} for n in nodes}
    changed = True
    while changed:
        changed = False
        for a, b in edges:
            if not reach[b] <= reach[a]:
                reach[a] |= reach[b]
                changed = True
    return reach


def part_of(module: str) -> str | None:
    """The diagram node a module belongs to; None for the standard library and third-party packages."""
    parts = module.split(".")
    if parts[0] == "evalwf":
        return parts[1] if len(parts) > 1 and not parts[1].startswith("__") else "evalwf"
    if parts[0] == "benchmarks":
        return "registry" if parts[1:2] == ["registry"] else "benchmarks"
    if parts[0] == PLUGIN:
        return "plugin"
    return None


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute name) of every import in `path`, function-level ones included; `from a import b` is `a.b`
    (b may be a module: `from benchmarks import registry`)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def package_sources(root: Path) -> list[Path]:
    return [p for pkg in ("evalwf", "benchmarks", PLUGIN) for p in sorted((root / pkg).rglob("*.py"))]


def boundary_offenders(root: Path, sources: list[Path], reach: dict[str, set[str]]) -> list[str]:
    found = []
    for path in sources:
        rel = path.relative_to(root)
        own = part_of(".".join(rel.with_suffix("").parts))
        for line, module in imported_modules(path):
            top = module.split(".", 1)[0]
            target = part_of(module)
            if target is not None and target not in reach.get(own, {own}):
                found.append(f"{rel}:{line}: {own} imports {module} ({target} is not reachable from {own})")
            if own in LIGHT_PARTS and top in ("snakemake", "labtasker", "labtasker_server"):
                found.append(f"{rel}:{line}: {own} is light core and imports {module}")
            if top == "snakemake" and own != "plugin" and str(rel) not in SNAKEMAKE_IMPORTERS:
                found.append(f"{rel}:{line}: imports {module} (only {sorted(SNAKEMAKE_IMPORTERS)} may)")
    return found


def plugin_importers(root: Path) -> list[str]:
    """Scripts (but the plugin's own benchmark) and workflow files that import the plugin."""
    found = []
    for path in sorted((root / "scripts").rglob("*.py")):
        if str(path.relative_to(root)) in PLUGIN_BENCHMARK_SCRIPTS:
            continue
        found += [
            f"{path.relative_to(root)}:{ln}: imports {m}" for ln, m in imported_modules(path) if part_of(m) == "plugin"
        ]
    for path in [root / "workflow" / "Snakefile", *sorted((root / "workflow").rglob("*.smk"))]:
        text = path.read_text(encoding="utf-8")
        for match in SMK_IMPORT.finditer(text):
            module = match.group(1) or match.group(2)
            if part_of(module) == "plugin":
                found.append(f"{path.relative_to(root)}:{text.count(chr(10), 0, match.start()) + 1}: imports {module}")
    return found


def test_the_scan_sees_imports_anywhere_and_against_the_diagram(tmp_path):
    reach = reachable({("plan", "benchmark"), ("benchmark", "common")})
    assert reach["plan"] == {"plan", "benchmark", "common"} and reach["common"] == {"common"}
    (tmp_path / "evalwf" / "benchmark").mkdir(parents=True)
    source = tmp_path / "evalwf" / "benchmark" / "m.py"
    source.write_text(
        "import evalwf.common.x\n"
        "def f():\n    from evalwf.plan import config\n    import snakemake_executor_plugin_labtasker.a\n"
        "    import snakemake.api\n"
    )
    assert boundary_offenders(tmp_path, [source], reach) == [
        "evalwf/benchmark/m.py:3: benchmark imports evalwf.plan.config (plan is not reachable from benchmark)",
        "evalwf/benchmark/m.py:4: benchmark imports snakemake_executor_plugin_labtasker.a"
        " (plugin is not reachable from benchmark)",
        "evalwf/benchmark/m.py:5: benchmark is light core and imports snakemake.api",
        "evalwf/benchmark/m.py:5: imports snakemake.api (only ['evalwf/worker/warm_step.py'] may)",
    ]
    (tmp_path / "workflow").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "workflow" / "Snakefile").write_text("include: 'x.smk'\n")
    (tmp_path / "workflow" / "x.smk").write_text(
        "rule a:\n    run:\n        from snakemake_executor_plugin_labtasker import X\n"
    )
    assert plugin_importers(tmp_path) == ["workflow/x.smk:3: imports snakemake_executor_plugin_labtasker"]


def test_the_diagram_names_every_part_and_no_other():
    edges = diagram_edges(ARCHITECTURE.read_text(encoding="utf-8"))
    drawn = {n for edge in edges for n in edge}
    parts = {p.name for p in (REPO / "evalwf").iterdir() if (p / "__init__.py").is_file()}
    assert drawn == parts | {"evalwf", "benchmarks", "registry", "plugin"}
    reach = reachable(edges)
    assert not any(a in reach[b] for a, b in edges if a != b), "the diagram has a cycle"
    assert "plugin" not in {n for part, r in reach.items() if part != "plugin" for n in r}


def test_every_module_imports_only_what_its_part_reaches():
    reach = reachable(diagram_edges(ARCHITECTURE.read_text(encoding="utf-8")))
    sources = package_sources(REPO)
    assert REPO / "evalwf" / "worker" / "main.py" in sources
    assert not boundary_offenders(REPO, sources, reach) + plugin_importers(REPO)


def test_each_part_says_what_it_owns_and_what_it_never_imports():
    for init in sorted((REPO / "evalwf").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert len(doc) > 80 and ("never" in doc.lower() or "nothing imports it" in doc.lower()), init


PROBE = (
    "import sys\n"
    "import evalwf.contract, evalwf.contract.affinity, evalwf.contract.loopback, evalwf.queue.embedded_server\n"
    "import evalwf.queue.tls\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
    "('snakemake', 'benchmarks', 'snakemake_executor_plugin_labtasker', 'labtasker'))\n"
    "assert 'snakemake' not in sys.modules and not loaded, loaded\n"
    "print(evalwf.contract.default_queue())\n"
)


def _interpreters() -> list[str]:
    """Ours (Snakemake installed but not imported) and, where it is set up, the LIBERO simulator's (no Snakemake)."""
    found = [sys.executable]
    libero = REPO / ".venv-libero" / "bin" / "python"
    if libero.exists():
        found.append(str(libero))
    return found


@pytest.mark.parametrize("python", _interpreters())
def test_the_contract_imports_without_snakemake(python):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "SNAKEMAKE_LABTASKER_QUEUE")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([python, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "evalwf"
