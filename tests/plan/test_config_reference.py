"""config/README.md explains every key the schemas accept, and the defaults it prints are the schemas' own: the
schemas are the only source of defaults, so a reference that drifts from them tells users the wrong thing."""

from __future__ import annotations

import re

import yaml
from conftest import REPO

from benchmarks import registry

README = (REPO / "config" / "README.md").read_text(encoding="utf-8")
ROW = re.compile(r"^\| `([\w.]+)` \| ([^|]+) \|", re.MULTILINE)


def _schema(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text(encoding="utf-8"))


def _section(benchmark: str) -> str:
    """The part of the README that describes one benchmark's own keys: from its bold heading to the next one."""
    start = README.index(f"**`{benchmark}`**")
    following = README.find("**`", start + 1)
    return README[start : following if following != -1 else len(README)]


def _leaves(properties: dict, prefix: str = "") -> dict[str, dict]:
    """Every key that holds a value, nested mappings flattened to dotted names (`observation.images`)."""
    keys = {}
    for key, schema in properties.items():
        if isinstance(schema, dict) and "properties" in schema:
            keys.update(_leaves(schema["properties"], f"{prefix}{key}."))
        else:
            keys[prefix + key] = schema
    return keys


def test_every_campaign_and_policy_key_is_explained():
    campaign = _schema("evalwf/plan/config.schema.yaml")
    policy = _schema("evalwf/policy/policy.schema.yaml")
    missing = [key for key in campaign["properties"] if f"`{key}`" not in README]
    missing += [f"policy.{key}" for key in policy["properties"] if f"`policy.{key}`" not in README]
    common = campaign["$defs"]["benchmark_common"]["properties"]
    missing += [f"benchmarks.<name>.{key}" for key in common if f"benchmarks.<name>.{key}`" not in README]
    assert not missing, f"config/README.md does not explain: {missing}"


def test_every_benchmark_key_is_in_its_table_with_the_schema_default():
    wrong = []
    for benchmark in registry.names():
        schema = _schema(f"benchmarks/{benchmark}/schema.yaml")
        section = _section(benchmark)
        rows = dict(ROW.findall(section))
        for key, spec in _leaves(schema.get("properties", {})).items():
            if key in {"episodes_per_task", "batch_size", "seed"}:  # common keys, explained above the tables
                continue
            if key not in rows:
                wrong.append(f"{benchmark}.{key}: not in its table")
                continue
            cell = rows[key].strip()
            if cell == "required" or "default" not in spec:
                if (cell == "required") != (key in schema.get("required", [])):
                    wrong.append(
                        f"{benchmark}.{key}: README says {cell!r}, the schema requires {schema.get('required')}"
                    )
                continue
            if yaml.safe_load(cell.replace("`", "")) != spec["default"]:
                wrong.append(f"{benchmark}.{key}: README default {cell}, schema default {spec['default']!r}")
    assert not wrong, wrong
