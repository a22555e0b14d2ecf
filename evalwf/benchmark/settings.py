"""A benchmark's settings as one typed, frozen value: what its adapter reads, built from its validated config section.

A benchmark's settings are declared once, in its schema (benchmarks/<name>/schema.yaml: keys, types, defaults,
descriptions). Its benchmarks/<name>/settings.py makes the settings class of it (`settings_class`): one field per
key, typed as the schema types it, and names it as its adapter's `settings_class`; the framework builds the value in
one place (evalwf.benchmark.adapter.benchmark_settings). The fields have no defaults: the schema is the only source
of defaults, so a section that has not been validated (and filled) against it fails here, naming the keys, instead
of quietly taking a second default. Nested mappings and lists are frozen too (read-only mappings, tuples): an
adapter cannot change what the plan hashed.

Runs in simulator interpreters (the light core): Python 3.10, no typing.Self.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any, TypeVar

from benchmarks import registry
from evalwf.common.errors import ConfigError

SettingsT = TypeVar("SettingsT", bound="BenchmarkSettings")


def frozen(value: Any) -> Any:
    """`value` with every mapping read-only and every list a tuple, all the way down."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(item) for item in value)
    return value


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings:
    """The keys every benchmark section has ($defs.benchmark_common of evalwf/plan/config.schema.yaml), less the
    campaign keys a section may hold (its policies and baseline: evalwf.plan.config.section_settings)."""

    episodes_per_task: int
    batch_size: int | Mapping[str, Mapping[str, int | None]]  # a fixed size, or {auto: ...} (evalwf.plan.batch_sizes)
    seed: int
    python: str | None  # the simulator's interpreter (evalwf.plan.interpreter); None: the workflow's own

    @classmethod
    def from_section(cls: type[SettingsT], section: Mapping[str, Any], where: str) -> SettingsT:
        """The settings of a validated section (`where` names it in errors: 'benchmarks.<name>'). Raises ConfigError
        naming every missing or unknown key: both mean the section did not come through its schema."""
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if name not in section]
        unknown = sorted(set(section) - set(names))
        if missing or unknown:
            problems = [f"missing {', '.join(missing)}"] if missing else []
            problems += [f"unknown {', '.join(unknown)}"] if unknown else []
            raise ConfigError(
                f"config section '{where}' cannot make {cls.__name__} ({'; '.join(problems)}): build settings from a "
                "section validated against its schema (evalwf.plan.config.validate_section fills its defaults), and "
                "keep the settings class's fields the schema's keys"
            )
        return cls(**{name: frozen(section[name]) for name in names})


# JSON schema types as the Python types of their frozen values (`frozen`: lists are tuples, mappings read-only)
_SCALARS = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "None"}


def python_type(schema: Mapping[str, Any]) -> str:
    """The Python type (annotation text) of a frozen value that a schema node admits: `int | None`,
    `Mapping[str, str | tuple[int, ...]]`, ...; `Any` where the schema does not say."""
    if "const" in schema:
        return _SCALARS.get(_json_type(schema["const"]), "Any")
    if "enum" in schema:
        return _union(_SCALARS.get(_json_type(value), "Any") for value in schema["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in schema:
            return _union(python_type(branch) for branch in schema[combinator])
    kinds = schema.get("type")
    names = []
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds else []:
        if kind == "array":
            names.append(f"tuple[{python_type(schema.get('items') or {})}, ...]")
        elif kind == "object":
            values = schema.get("additionalProperties")
            names.append(f"Mapping[str, {python_type(values) if isinstance(values, dict) else 'Any'}]")
        else:
            names.append(_SCALARS.get(kind, "Any"))
    return _union(names) if names else "Any"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string"}.get(type(value), "any")


def _union(names: Any) -> str:
    unique = list(dict.fromkeys(names))
    return "Any" if "Any" in unique else " | ".join(unique)


def settings_class(class_name: str, module: str) -> type[BenchmarkSettings]:
    """The settings class of the benchmark whose package holds `module` (its settings.py: pass __name__), made from
    the package's schema.yaml, the one declaration of its settings: one frozen field per key of the schema (after the
    keys every benchmark has), typed as the schema types it. Raises registry.BrokenSchema naming the schema's file,
    line and column when it is not YAML."""
    package = module.rpartition(".")[0]
    schema = registry.load_schema(resources.files(package).joinpath("schema.yaml"), repr(package.rpartition(".")[2]))
    common = {field.name for field in dataclasses.fields(BenchmarkSettings)}
    fields = [(key, python_type(sub)) for key, sub in schema.get("properties", {}).items() if key not in common]
    cls = dataclasses.make_dataclass(class_name, fields, bases=(BenchmarkSettings,), frozen=True)
    cls.__module__ = module
    cls.__doc__ = f"The settings of {package}: one field per key of its schema.yaml (and the keys every benchmark has)."
    return cls
