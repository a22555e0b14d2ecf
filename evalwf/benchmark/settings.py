"""A benchmark's settings as one typed, frozen value: what its adapter reads, built from its validated config section.

Each benchmark declares a subclass in benchmarks/<name>/settings.py with one field per key of its schema
(benchmarks/<name>/schema.yaml) and names it as its adapter's `settings_class`; the framework builds it in one
place (evalwf.benchmark.adapter.benchmark_settings). The fields have no defaults: the schema is the only source of
defaults, so a section that has not been validated (and filled) against it fails here, naming the keys, instead of
quietly taking a second default. Nested mappings and lists are frozen too (read-only mappings, tuples): an adapter
cannot change what the plan hashed.

Runs in simulator interpreters (the light core): Python 3.10, no typing.Self.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

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
    batch_size: int
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
