"""Invariant 10: the schema is the only source of defaults, and a benchmark is one folder plus its schema,
registered in one place (benchmarks/registry.py)."""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO, standin_config

from benchmarks import registry
from evalwf.plan import config as config_module
from evalwf.plan.config import config_schema, validate_config

# Code that reads validated config: the benchmark folders (their settings included) and the framework modules that
# fill or read sections.
SCANNED = [
    *(p for name in registry.names() for p in sorted((REPO / "benchmarks" / name).glob("*.py"))),
    *(p for part in ("plan", "policy", "rules") for p in sorted((REPO / "evalwf" / part).glob("*.py"))),
    REPO / "evalwf" / "benchmark" / "settings.py",
]
PLUGIN = REPO / "snakemake_executor_plugin_labtasker"


def _keys_with_defaults(node: Any, found: set[str]) -> set[str]:
    """Every property name that some (sub)schema gives a default."""
    if isinstance(node, dict):
        for key, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict) and "default" in sub:
                found.add(key)
        for value in node.values():
            _keys_with_defaults(value, found)
    elif isinstance(node, list):
        for value in node:
            _keys_with_defaults(value, found)
    return found


def _property_names(node: Any, found: set[str]) -> set[str]:
    """Every property name of the schema, with a default or not."""
    if isinstance(node, dict):
        found.update(key for key in (node.get("properties") or {}) if isinstance(node["properties"], dict))
        for value in node.values():
            _property_names(value, found)
    elif isinstance(node, list):
        for value in node:
            _property_names(value, found)
    return found


SCHEMA_KEYS = _keys_with_defaults(config_schema(), set())
CONFIG_KEYS = _property_names(config_schema(), set())


def default_copies(source: str, keys: set[str] = SCHEMA_KEYS, config_keys: set[str] = CONFIG_KEYS) -> Iterator[str]:
    """Places in `source` that give a schema key a default of their own: `.get(key, default)`,
    `.setdefault(key, default)` (of any config key: one the schema gives no default, as `baseline`, gets none
    written in either), a parameter named after the key with a default value, and module-level `*DEFAULT*`
    tables naming schema keys."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "setdefault") and len(node.args) == 2:
                key = node.args[0]
                named = keys | config_keys if node.func.attr == "setdefault" else keys
                if isinstance(key, ast.Constant) and key.value in named:
                    yield f"line {node.lineno}: .{node.func.attr}({key.value!r}, <default>)"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args
            for arg, _default in zip(args[len(args) - len(node.args.defaults) :], node.args.defaults, strict=True):
                if arg.arg in keys:
                    yield f"line {node.lineno}: parameter {arg.arg}= with a default"
            for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
                if default is not None and arg.arg in keys:
                    yield f"line {node.lineno}: parameter {arg.arg}= with a default"
    for node in ast.walk(tree):  # dataclass fields: `replan_steps: int = 5` in a class body
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                named = isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                if named and item.value is not None and item.target.id in keys:
                    yield f"line {item.lineno}: field {item.target.id} with a default"
    for node in tree.body:
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        value = getattr(node, "value", None)
        if any("DEFAULT" in n.upper() for n in names) and isinstance(value, ast.Dict):
            named = [k.value for k in value.keys if isinstance(k, ast.Constant) and k.value in keys]
            if named:
                yield f"line {node.lineno}: {names[0]} repeats schema defaults of {', '.join(named)}"


def test_the_scan_finds_a_default_copy():
    """The scan is not vacuous: the shapes the adapters used to have are found."""
    sample = (
        "DEFAULTS = {'replan_steps': 5}\n"
        "def f(cfg, camera_size=256):\n"
        "    return cfg.get('max_steps', 40), cfg.setdefault('seed', 7)\n"
        "class Spec:\n"
        "    startup_timeout_s: float = 600.0\n"
        "config.setdefault('baseline', blocks[0]['name'])\n"
    )
    assert len(list(default_copies(sample))) == 6


def executor_default_copies(source: str) -> Iterator[str]:
    """Places in the executor plugin that give one of its settings a default of its own, `settings.<name> or
    <value>` where <value> is that setting's dataclass default (a literal, or the module constant it names)."""
    import snakemake_executor_plugin_labtasker as plugin

    defaults = {
        field.name: field.default
        for field in dataclasses.fields(plugin.ExecutorSettings)
        if field.default not in (dataclasses.MISSING, None)
    }
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2):
            continue
        setting, fallback = node.values
        if not (isinstance(setting, ast.Attribute) and setting.attr in defaults):
            continue
        if isinstance(fallback, ast.Constant):
            value = fallback.value
        elif isinstance(fallback, ast.Name) and hasattr(plugin, fallback.id):
            value = getattr(plugin, fallback.id)
        else:
            continue
        if value == defaults[setting.attr]:
            yield f"line {node.lineno}: .{setting.attr} or {value!r} repeats the setting's default"


def test_the_executor_scan_finds_a_default_copy():
    sample = "self.scheduling = settings.scheduling or 'longest-first'\nq = settings.queue or DEFAULT_QUEUE\n"
    assert len(list(executor_default_copies(sample))) == 2


@pytest.mark.parametrize("path", sorted(PLUGIN.glob("*.py")), ids=lambda p: p.name)
def test_the_executor_settings_defaults_are_their_dataclass_fields_only(path):
    found = list(executor_default_copies(path.read_text(encoding="utf-8")))
    assert not found, f"{path.relative_to(REPO)}:\n" + "\n".join(found)


def test_a_baseline_left_out_is_derived_not_written_into_the_config(tmp_path):
    """No schema default can name a baseline (it depends on the policies): validation leaves it out, and the one
    place that derives it (evalwf.plan.config, into CampaignConfig.baseline) says the first policy."""
    from evalwf.plan.campaign import Campaign

    raw = standin_config(tmp_path)
    block = raw.pop("policy")
    raw["policies"] = [{**block, "name": name} for name in ("first", "second")]
    config = validate_config(raw)
    assert "baseline" not in config.document()
    assert config.baseline == "first" == config.benchmark_baseline("standin")
    campaign = Campaign(config)
    assert campaign.baseline.policy.name == "first" and campaign.baseline_of("standin") == "first"
    named = validate_config({**raw, "baseline": "second"})
    assert Campaign(named).baseline.policy.name == "second" == named.benchmark_baseline("standin")


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(REPO)))
def test_no_default_in_code_for_a_schema_key(path):
    found = list(default_copies(path.read_text(encoding="utf-8")))
    assert not found, f"{path.relative_to(REPO)} gives schema keys defaults of its own (the schema has them):\n" + (
        "\n".join(found)
    )


def test_every_benchmark_default_comes_from_its_schema(tmp_path):
    """Seeds per benchmark (LIBERO's community 7) and nested blocks (RoboTwin's observation mapping) are filled in
    by validation; the policy spec fills a worker's policy block from the schema too."""
    from evalwf.policy.spec import PolicySpec

    section = config_module.validate_section(
        "libero", {"episodes_per_task": 2, "batch_size": 1, "suites": {"libero_goal": "all"}}
    )
    assert section["seed"] == 7 and section["replan_steps"] == 5
    robotwin = config_module.validate_section("robotwin", {"episodes_per_task": 2, "batch_size": 1})
    assert robotwin["seed"] == 0
    assert robotwin["observation"]["images"]["cam_high"] == "head_camera"
    assert robotwin["action"] == {"type": "qpos", "dim": 14, "delta": False}
    spec = PolicySpec.from_config({"name": "p", "url": "ws://h:1"})
    assert (spec.protocol, spec.startup_timeout_s, spec.env) == ("openpi-websocket", 600, {})


def test_hand_built_sections_are_validated():
    section = {"episodes_per_task": 1, "batch_size": 1, "suites": {"libero_goal": [0]}, "replan_step": 1}
    with pytest.raises(config_module.ConfigError, match=r"benchmarks\.libero\.replan_step"):
        config_module.validate_section("libero", section)


# ----------------------------------------------------------------------------------------------- the registry


def test_registry_drives_schema_wildcard_and_adapters():
    schema = config_schema()
    assert set(schema["properties"]["benchmarks"]["properties"]) == set(registry.names())
    assert set(schema["properties"]["reference"]["properties"]) == {"source", *registry.names()}
    assert re.fullmatch(registry.wildcard_pattern(), "standin")
    assert not re.fullmatch(registry.wildcard_pattern(), "standin2")
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert "benchmark=registry.wildcard_pattern()" in common


def test_benchmark_names_appear_only_in_the_registry():
    """No framework file (evalwf's parts, the workflow rules, the schemas) names a benchmark: they all read the
    registry. Adapters say what differs about them (manifest GPUs, setup hints) as class attributes."""
    framework = [
        *sorted((REPO / "evalwf").rglob("*.py")),
        *sorted((REPO / "evalwf").rglob("*.schema.yaml")),
        *sorted((REPO / "workflow" / "rules").glob("*.smk")),
    ]
    pattern = re.compile(r"""["'](standin|libero|robotwin)["']""")
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in framework
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, "\n".join(offenders)


@pytest.fixture
def toy_benchmark(tmp_path, monkeypatch):
    """A new benchmark 'toy' in one folder of its own, registered with one entry: the stand-in's schema, typed
    settings of its own (the stand-in's fields), an adapter that reads them (the stand-in's mechanics)."""
    package = tmp_path / "toybench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(REPO / "benchmarks" / "standin" / "schema.yaml", package / "schema.yaml")
    (package / "settings.py").write_text(
        "from dataclasses import dataclass\n\nfrom benchmarks.standin.settings import StandinSettings\n\n\n"
        "@dataclass(frozen=True)\nclass ToySettings(StandinSettings):\n    pass\n"
    )
    (package / "adapter.py").write_text(
        "from benchmarks.standin.adapter import StandinAdapter\nfrom toybench.settings import ToySettings\n\n\n"
        "class ToyAdapter(StandinAdapter):\n    settings_class = ToySettings\n\n\nAdapter = ToyAdapter\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.BENCHMARKS, "toy", "toybench")  # the one edit
    config_schema.cache_clear()
    yield "toy"
    monkeypatch.delitem(registry.BENCHMARKS, "toy")
    config_schema.cache_clear()
    for module in ("toybench.adapter", "toybench.settings", "toybench"):
        sys.modules.pop(module, None)


def test_adding_a_benchmark_is_one_registry_entry(tmp_path, toy_benchmark):
    from evalwf.plan.campaign import Campaign

    raw = standin_config(tmp_path)
    raw["benchmarks"] = {"toy": raw["benchmarks"]["standin"]}
    raw["reference"] = {"toy": {"alpha": 50}}
    campaign = Campaign(validate_config(raw))
    assert {plan.ref.benchmark for plan in campaign.tasks} == {"toy"}
    assert {plan.definition["benchmark"] for plan in campaign.tasks} == {"toy"}, "named by its registry key"
    settings = campaign.settings("toy")
    assert type(settings).__name__ == "ToySettings" and settings.replan_steps == 5, "typed, its schema's defaults"
    assert registry.adapter("toy").name == "toy"
    assert re.fullmatch(registry.wildcard_pattern(), "toy")
    assert campaign.single().summary_paths("toy")["reference"].endswith("reference_comparison.csv")


def test_the_standin_is_registered_in_one_place(tmp_path, monkeypatch):
    """Without its registry entry the stand-in is unknown everywhere: config schema, wildcard and adapter lookup."""
    from evalwf.benchmark.adapter import get_adapter

    monkeypatch.delitem(registry.BENCHMARKS, "standin")
    config_schema.cache_clear()
    try:
        with pytest.raises(config_module.ConfigError, match=r"unknown config key 'benchmarks\.standin'"):
            validate_config(standin_config(tmp_path))
        assert not re.fullmatch(registry.wildcard_pattern(), "standin")
        with pytest.raises(KeyError, match="unknown benchmark 'standin'"):
            get_adapter("standin")
    finally:
        monkeypatch.undo()
        config_schema.cache_clear()
