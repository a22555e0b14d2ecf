"""The light core: the modules that run in a benchmark's own interpreter, and the check that they run on its oldest.

    python scripts/light_core.py --files                    # the light core's files (one per line)
    python scripts/light_core.py --check .venv-py310/bin/python

The light core is everything `evalwf.job.sim_step`, `evalwf.job.sim_checks` and the registered adapters import,
function-level imports included (the adapters are imported by name at run time, so they are roots of their own): the
simulator side of a job step and of a node's checks, which runs in RoboTwin's Python 3.10 with numpy 1.26 as well as
in the workflow's Python >= 3.11.

`--check PYTHON` (run by the workflow's interpreter, PYTHON the oldest one) fails naming file and line when
- ruff finds syntax newer than Python 3.10 in a light-core file or in the stand-in RoboTwin checkout (which runs
  there too), or PYTHON cannot compile one of them;
- a light-core module does not import in PYTHON (this checkout on PYTHONPATH, as job steps put it);
- any import of a standard-library module, or of a name from one, anywhere in those files (inside functions too,
  where importing the module would not notice), or an attribute of an imported standard-library module
  (`datetime.UTC`), does not exist in PYTHON: ruff checks syntax only, not which modules a Python version has.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("evalwf", "benchmarks")  # the framework and the benchmarks: what simulator interpreters import from
REGISTRY = Path("benchmarks/registry.py")
ENTRY_MODULE = "evalwf.job.sim_step"
NODE_CHECKS_MODULE = "evalwf.job.sim_checks"  # the other entry point there: a node's checks (evalwf doctor, workers)
# Laid out like upstream RoboTwin (imported as `envs...` with the checkout on sys.path), run by the same interpreter.
STANDIN_CHECKOUT = Path("benchmarks/robotwin/standin_checkout")
# Never in a simulator's environment (invariant 9): a light-core module that needs one of them is an error. Any other
# missing third-party package is the simulator's own (LIBERO's Pillow, RoboTwin's sapien), which the light
# environment does not have: the module is then checked by compiling and scanning it, not by importing it.
WORKFLOW_ONLY = ("snakemake", "labtasker", "pandas", "matplotlib")


def _module_name(repo: Path, path: Path) -> str:
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(repo: Path = REPO) -> dict[str, Path]:
    """Every module of the framework and the benchmarks (the stand-in checkout is not part of them)."""
    return {
        _module_name(repo, path): path
        for package in PACKAGES
        for path in sorted((repo / package).rglob("*.py"))
        if STANDIN_CHECKOUT.parts[-1] not in path.parts
    }


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """module -> the framework and benchmark modules it imports anywhere (function-level imports included)."""
    modules = package_modules(repo)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            found.update(c for c in candidates if c in modules and c != name)
        graph[name] = found
    return graph


def registered_adapters(repo: Path = REPO) -> list[str]:
    """`<package>.adapter` of every benchmark in benchmarks/registry.py's table (read, not imported)."""
    tree = ast.parse((repo / REGISTRY).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "BENCHMARKS":
            table = ast.literal_eval(node.value) if node.value else {}
            return [f"{package}.adapter" for package in table.values()]
    raise RuntimeError(f"{repo / REGISTRY}: no BENCHMARKS table")


def light_core(repo: Path = REPO) -> dict[str, Path]:
    """module -> file of every light-core module: the import closure of the entry point and the adapters."""
    graph, modules = import_graph(repo), package_modules(repo)
    todo, seen = [ENTRY_MODULE, NODE_CHECKS_MODULE, *registered_adapters(repo)], set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
            parent = name.rpartition(".")[0]
            if parent in modules:
                todo.append(parent)  # importing a module runs its packages' __init__
    return {name: modules[name] for name in sorted(seen)}


def checked_files(repo: Path = REPO) -> list[Path]:
    """What must run on the oldest interpreter: the light core and the stand-in checkout."""
    return [*light_core(repo).values(), *sorted((repo / STANDIN_CHECKOUT).rglob("*.py"))]


def stdlib_references(path: Path, stdlib: frozenset[str]) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) for every standard-library module `path` imports anywhere, every name it
    imports from one, and every attribute it reads of an imported one (`import datetime` ... `datetime.UTC`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str, str | None]] = []
    bound: dict[str, set[str]] = {}  # local name -> the standard-library modules imported under it
    type_checking_only = {id(sub) for node in ast.walk(tree) if _is_type_checking(node) for sub in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in type_checking_only:
            continue  # `if TYPE_CHECKING:` imports are never run
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in stdlib:
                    found.append((node.lineno, alias.name, None))
                    local = alias.asname or alias.name.split(".")[0]
                    bound.setdefault(local, set()).add(alias.name if alias.asname else alias.name.split(".")[0])
                    if not alias.asname:
                        bound[local].add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in stdlib:
            found += [(node.lineno, str(node.module), alias.name) for alias in node.names if alias.name != "*"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            modules = bound[node.value.id]
            module = next((m for m in modules if "." not in m), None)
            if module is not None and f"{module}.{node.attr}" not in modules:
                found.append((node.lineno, module, node.attr))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and f"{node.value.value.id}.{node.value.attr}" in bound.get(node.value.value.id, set())
        ):
            found.append((node.lineno, f"{node.value.value.id}.{node.value.attr}", node.attr))
    return sorted(set(found), key=lambda ref: (ref[0], ref[1], ref[2] or ""))


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# Runs in the interpreter under test (any Python >= 3.8): stdin {"modules", "files", "references", "stdlib",
# "workflow_only"}, stdout {"problems", "needs" (module -> the simulator package it imports), "python", "numpy"}.
PROBE = r"""
import importlib, importlib.util, json, sys, traceback
request = json.load(sys.stdin)
problems, needs, failed = [], {}, {}
for path, shown in request["files"].items():
    try:
        with open(path, encoding="utf-8") as handle:
            compile(handle.read(), path, "exec", dont_inherit=True)
    except SyntaxError as error:
        problems.append("%s:%s: does not compile: %s" % (shown, error.lineno, error.msg))
def simulator_package(error):
    top = (error.name or "").split(".")[0] if isinstance(error, ModuleNotFoundError) else ""
    return top if top and top not in request["stdlib"] + request["workflow_only"] + ["benchmarks", "evalwf"] else None
for name in request["modules"]:
    try:
        importlib.import_module(name)
    except BaseException as error:
        if simulator_package(error):
            needs[name] = simulator_package(error)
            continue
        where = traceback.extract_tb(error.__traceback__)[-1]
        cause = "%s:%s: %s: %s" % (where.filename, where.lineno, type(error).__name__, error)
        failed.setdefault(cause, []).append(name)
for cause, names in failed.items():  # one cause (a module everything imports) is one problem
    problems.append("%s (importing %s)" % (cause, ", ".join(names)))
def exists(module, name):
    try:
        if importlib.util.find_spec(module) is None:
            return False
    except (ImportError, ValueError):
        return False
    if name is None:
        return True
    try:
        found = importlib.import_module(module)
    except ImportError:
        return False
    if hasattr(found, name):
        return True
    try:
        return importlib.util.find_spec(module + "." + name) is not None
    except (ImportError, ValueError):
        return False
for path, line, module, name in request["references"]:
    if not exists(module, name):
        what = module if name is None else module + "." + name
        problems.append("%s:%s: %s does not exist on Python %s" % (path, line, what, sys.version.split()[0]))
import numpy
print(json.dumps({"problems": problems, "needs": needs, "python": sys.version.split()[0], "numpy": numpy.__version__}))
"""


def check(python: str, repo: Path = REPO) -> tuple[list[str], str]:
    """(problems, a summary line) of the light core of `repo` under `python`."""
    modules, files = light_core(repo), checked_files(repo)
    shown = {str(path): str(path.relative_to(repo)) for path in files}
    syntax = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--target-version", "py310",
         "--select", "E9", "--output-format", "concise", *shown],
        capture_output=True, text=True, cwd=repo,
    )  # fmt: skip
    problems = [line for line in syntax.stdout.splitlines() if "invalid-syntax" in line or "SyntaxError" in line]
    if syntax.returncode not in (0, 1) or (syntax.returncode == 1 and not problems):
        problems.append(f"ruff failed ({syntax.returncode}): {syntax.stderr.strip() or syntax.stdout.strip()}")
    stdlib = frozenset(sys.stdlib_module_names)
    references = [
        (shown[str(path)], line, module, name)
        for path in files
        for line, module, name in stdlib_references(path, stdlib)
    ]
    request = {
        "modules": {n: shown[str(p)] for n, p in modules.items()},
        "files": shown,
        "references": references,
        "stdlib": sorted(stdlib),
        "workflow_only": list(WORKFLOW_ONLY),
    }
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONPATH"] = str(repo)  # as a job step runs it (evalwf.plan.interpreter.child_env)
    done = subprocess.run(
        [python, "-B", "-c", PROBE], input=json.dumps(request), capture_output=True, text=True, cwd=repo, env=env,
        timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        return [*problems, f"{python}: the probe failed ({done.returncode}): {done.stderr.strip()[-2000:]}"], ""
    answer = json.loads(done.stdout)
    needs = ", ".join(f"{module} (needs {package})" for module, package in sorted(answer["needs"].items()))
    summary = (
        f"light core: {len(modules)} modules and {len(files) - len(modules)} stand-in checkout files on Python "
        f"{answer['python']} with numpy {answer['numpy']} ({python}): {len(references)} standard-library references "
        f"found; imported all but {needs or 'none'}, which only their simulator's environment imports"
    )
    return [*problems, *answer["problems"]], summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--files", action="store_true", help="print the light core's files, one per line")
    group.add_argument("--check", metavar="PYTHON", help="check the light core on this interpreter")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to check (default: this one)")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    if args.files:
        print("\n".join(str(path.relative_to(repo)) for path in light_core(repo).values()))
        return 0
    python = os.path.abspath(args.check)  # not resolved: a venv's bin/python is a link to its base interpreter
    if not Path(python).exists():
        print(f"light core: {args.check} does not exist; build it with `make py310-env`", file=sys.stderr)
        return 1
    problems, summary = check(python, repo)
    if problems:
        print(f"light core: {len(problems)} problem(s) on {args.check}:", file=sys.stderr)
        print("\n".join(f"  {problem}" for problem in problems), file=sys.stderr)
        print(
            "  The light core runs in every benchmark's interpreter (Python >= 3.10, numpy >= 1.26): use what "
            "Python 3.10 has (timezone.utc, not datetime.UTC; typing imports behind TYPE_CHECKING; ...).",
            file=sys.stderr,
        )
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
