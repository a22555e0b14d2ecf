"""The benchmarks this workflow evaluates: registering one is one line here.

A benchmark is one folder under benchmarks/ (a package) holding `adapter.py` (module attribute ADAPTER, a
evalwf.benchmark.adapter.BenchmarkAdapter) and `schema.yaml` (its config section, defaults included). Everything
that names benchmarks reads this table: the config schema's `benchmarks` and `reference` keys
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


def adapter(benchmark: str) -> Any:
    """The benchmark's adapter instance (imported on first use: adapters import no simulator)."""
    return importlib.import_module(f"{package(benchmark)}.adapter").ADAPTER


def schema_file(benchmark: str) -> Traversable:
    """The benchmark's config section schema file: schema.yaml in its package (package data in a wheel)."""
    return resources.files(package(benchmark)).joinpath("schema.yaml")


def section_schema(benchmark: str) -> dict[str, Any]:
    """The benchmark's config section schema (its package's schema.yaml)."""
    return yaml.safe_load(schema_file(benchmark).read_text(encoding="utf-8"))


def wildcard_pattern() -> str:
    """The regular expression of the workflow's `benchmark` wildcard: exactly the registered names."""
    return "|".join(re.escape(name) for name in BENCHMARKS)
