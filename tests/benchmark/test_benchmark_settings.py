"""Each benchmark's typed settings: one frozen field per key of its schema, no defaults of their own, built from the
validated section only (a missing or unknown key fails naming it), and the manifests they define unchanged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import REPO

from benchmarks import registry
from evalwf.benchmark.adapter import benchmark_settings, get_adapter
from evalwf.benchmark.settings import BenchmarkSettings
from evalwf.common.errors import ConfigError
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import SECTION_CAMPAIGN_KEYS, config_schema, load_config, validate_section

SMALLEST = {
    "standin": {
        "episodes_per_task": 2,
        "batch_size": 1,
        "suites": {"alpha": ["reach"]},
        "faults": [{"task": "x", "kind": "hang"}],
    },
    "libero": {"episodes_per_task": 2, "batch_size": 1, "suites": {"libero_goal": [0, 1]}},
    "robotwin": {"episodes_per_task": 2, "batch_size": 1, "tasks": ["click_bell"]},
}


def test_every_registered_benchmark_has_a_settings_example():
    assert set(SMALLEST) == set(registry.names())


@pytest.mark.parametrize("benchmark", registry.names())
def test_one_field_per_schema_key_and_no_default_of_its_own(benchmark):
    cls = get_adapter(benchmark).settings_class
    assert issubclass(cls, BenchmarkSettings) and cls.__module__ == f"{registry.package(benchmark)}.settings"
    keys = set(config_schema()["$defs"][benchmark]["properties"]) - set(SECTION_CAMPAIGN_KEYS)
    fields = dataclasses.fields(cls)
    assert {field.name for field in fields} == keys
    with_defaults = [f.name for f in fields if f.default is not dataclasses.MISSING]
    with_defaults += [f.name for f in fields if f.default_factory is not dataclasses.MISSING]
    assert not with_defaults, f"{cls.__name__} gives {with_defaults} defaults: the schema is their only source"


@pytest.mark.parametrize("benchmark", registry.names())
def test_built_from_the_validated_section_with_the_schemas_defaults(benchmark):
    section = validate_section(benchmark, SMALLEST[benchmark])
    settings = benchmark_settings(benchmark, section)
    assert type(settings) is get_adapter(benchmark).settings_class
    for key, value in section.items():
        assert _thawed(getattr(settings, key)) == value, key
    defaults = config_schema()["$defs"][benchmark]["properties"]
    # the keys the example leaves out come from the schema (nested blocks are filled key by key, inside)
    filled = [
        key for key in section if key not in SMALLEST[benchmark] and not isinstance(defaults[key]["default"], dict)
    ]
    assert filled and all(_thawed(getattr(settings, key)) == defaults[key]["default"] for key in filled)


def _thawed(value):
    if isinstance(value, tuple):
        return [_thawed(item) for item in value]
    if hasattr(value, "items"):
        return {key: _thawed(item) for key, item in value.items()}
    return value


@pytest.mark.parametrize("benchmark", registry.names())
def test_a_section_missing_a_key_or_with_an_unknown_one_fails_naming_it(benchmark):
    section = validate_section(benchmark, SMALLEST[benchmark])
    with pytest.raises(ConfigError, match=rf"'benchmarks\.{benchmark}'.*missing replan_steps"):
        benchmark_settings(benchmark, {k: v for k, v in section.items() if k != "replan_steps"})
    with pytest.raises(ConfigError, match=r"missing .*seed"):
        benchmark_settings(benchmark, SMALLEST[benchmark])  # not validated: the schema's defaults are not there
    with pytest.raises(ConfigError, match=r"unknown replan_step\b"):
        benchmark_settings(benchmark, {**section, "replan_step": 3})
    with pytest.raises(ConfigError, match=r"unknown policy"):  # campaign keys are not the benchmark's settings
        benchmark_settings(benchmark, {**section, "policy": {"name": "p", "url": "ws://h:1"}})


def test_settings_are_frozen_all_the_way_down():
    settings = benchmark_settings("standin", validate_section("standin", SMALLEST["standin"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.suites["beta"] = "all"  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.step_time_s["tasks"]["reach"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.faults[0]["kind"] = "raise"  # type: ignore[index]
    assert settings.suites["alpha"] == ("reach",) and isinstance(settings.faults, tuple)
    assert settings == benchmark_settings("standin", validate_section("standin", SMALLEST["standin"]))


def test_the_adapters_name_is_its_registry_key():
    for benchmark in registry.names():
        assert get_adapter(benchmark).name == benchmark
        source = (Path(REPO) / "benchmarks" / benchmark / "adapter.py").read_text(encoding="utf-8")
        assert "name =" not in source and f'"{benchmark}"' not in source, "the name is the registry's, not repeated"


def test_the_standins_manifest_names_are_unchanged():
    """The names (hashes of the definitions the adapter makes from its settings) of config/standin.yaml's
    manifests: a change would orphan every cached manifest and finished batch of existing runs."""
    campaign = Campaign(load_config(REPO / "config" / "standin.yaml"))
    names = {f"{plan.scope}/{plan.ref.task}": plan.manifest_hash for plan in campaign.tasks}
    assert names == {
        "alpha/push": "9974c88f3cbe2583",
        "alpha/reach": "18bae9828517715c",
        "beta/open": "0a5ebef0c21c28dc",
    }
