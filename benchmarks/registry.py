"""The benchmarks this workflow evaluates: registering one is one line here.

A benchmark is one folder under benchmarks/ (a package) holding `adapter.py` (module attribute `Adapter`, its
evalwf.benchmark.adapter.BenchmarkAdapter subclass), `settings.py` (the frozen dataclass its adapter reads) and
`schema.yaml` (its config section, defaults included); docs/adding-a-benchmark.md walks through one. The key here
is the benchmark's name everywhere: the registry makes the adapter's one instance with it. Everything that names
benchmarks reads this table: the config schema's `benchmarks` and `reference` keys
(evalwf.plan.config), the `benchmark` wildcard of the workflow (workflow/rules/common.smk) and the adapter
lookup (evalwf.benchmark.adapter.get_adapter).
"""

from __future__ import annotations

import importlib
import re
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # importlib.resources.abc is Python >= 3.11; the simulator side also runs on 3.10
    from importlib.resources.abc import Traversable

# benchmark name -> its package
BENCHMARKS: dict[str, str] = {
    "standin": "benchmarks.standin",
    "libero": "benchmarks.libero",
    "robotwin": "benchmarks.robotwin",
}


def names() -> tuple[str, ...]:
    return tuple(BENCHMARKS)


def package(benchmark: str) -> str:
    """The benchmark's package (its folder under benchmarks/)."""
    try:
        return BENCHMARKS[benchmark]
    except KeyError:
        raise KeyError(f"unknown benchmark {benchmark!r}; known: {', '.join(sorted(BENCHMARKS))}") from None


# (benchmark, package) -> its adapter instance, made once
_ADAPTERS: dict[tuple[str, str], Any] = {}


def adapter(benchmark: str) -> Any:
    """The benchmark's adapter instance, named `benchmark` (its module imported on first use: adapters import no
    simulator)."""
    key = (benchmark, package(benchmark))
    if key not in _ADAPTERS:
        _ADAPTERS[key] = importlib.import_module(f"{key[1]}.adapter").Adapter(benchmark)
    return _ADAPTERS[key]


def schema_file(benchmark: str) -> Traversable:
    """The benchmark's config section schema file: schema.yaml in its package (package data in a wheel)."""
    return resources.files(package(benchmark)).joinpath("schema.yaml")


class BrokenSchema(ValueError):
    """A benchmark's schema.yaml cannot be read as a schema; the message names its file, line and column. Only that
    benchmark is refused: the others still list, validate and run."""


def section_schema(benchmark: str) -> dict[str, Any]:
    """The benchmark's config section schema (its package's schema.yaml)."""
    return load_schema(schema_file(benchmark), repr(benchmark))


def load_schema(path: Traversable, benchmark: str) -> dict[str, Any]:
    """A benchmark's schema.yaml (`benchmark` names it in errors). Raises BrokenSchema naming the file, the line and
    the column of a YAML syntax error (yaml's own names "<unicode string>"), or a top level that is not a mapping."""
    try:
        schema = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or str(error)
        raise BrokenSchema(
            f"benchmark {benchmark} is refused: its schema {where}: YAML syntax error: {problem}; fix the file "
            "(the other benchmarks are not affected)"
        ) from None
    if not isinstance(schema, dict) or not isinstance(schema.get("properties", {}), dict):
        raise BrokenSchema(
            f"benchmark {benchmark} is refused: its schema {path}: the top level must be a mapping (a JSON schema of "
            "the benchmark's config section, its settings under `properties`); fix the file (the other benchmarks "
            "are not affected)"
        )
    return schema


def wildcard_pattern() -> str:
    """The regular expression of the workflow's `benchmark` wildcard: exactly the registered names."""
    return "|".join(re.escape(name) for name in BENCHMARKS)
