"""The registered benchmarks (benchmarks/registry.py), their settings and their simulator environments.

    evalwf benchmark list                                  # name, package, schema, default interpreter, suites, tasks
    evalwf benchmark show NAME                             # every setting of NAME's config section (its schema)
    evalwf benchmark check NAME [--configfile F ...]       # NAME's jobs can run on this node: one line per check

`show` reads the schema only: it is the only source of defaults. `check` resolves `benchmarks.NAME.python` from the
config files (without any, from the schema's default: the workflow's own interpreter) as the workflow does
(evalwf.job.interpreter), then runs NAME's node checks there (evalwf.job.node_probe: the job code imports,
and the adapter's own checks: simulator, renderer, assets), the benchmark part of `evalwf doctor`. Exit status 0
when every check passed, 1 when one failed (each failure printed with its fix), 2 for a bad config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import registry
from evalwf.common.errors import ConfigError
from evalwf.common.json_types import JsonValue
from evalwf.common.paths import PROJECT_ROOT
from evalwf.job import node_probe
from evalwf.plan.campaign_config import SectionDocument
from evalwf.plan.config import (
    NOT_RESULTS_DEFINING,
    ON_CHANGE,
    benchmark_sections,
    config_schema,
    schema_refusals,
    validate_section,
)


def section_properties(name: str) -> dict[str, JsonValue]:
    """The settings of benchmark `name`'s section: the keys every benchmark has, then its own schema's."""
    return config_schema()["$defs"][name]["properties"]


def _shown_path(path: Any) -> str:
    try:
        return str(Path(str(path)).relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def type_text(schema: dict[str, JsonValue]) -> str:
    """A schema node's type in a few words: `integer`, `one of none, failures, all`, `list of string`, ..."""
    if "const" in schema:
        return json.dumps(schema["const"])
    if "$ref" in schema:  # a block of the campaign's own (a benchmark's policy): as the top-level key
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        main = config_schema()
        if name not in main["properties"] and name in main["$defs"]:  # a shared value (batch_size): what it admits
            return type_text(main["$defs"][name])
        return f"as the top-level `{name}`"
    if "enum" in schema:
        values = [json.dumps(v) if not isinstance(v, str) else v for v in schema["enum"]]
        shown = values if len(values) <= 6 else [*values[:3], f"... ({len(values)} values)"]
        return "one of " + ", ".join(shown)
    for combinator in ("oneOf", "anyOf"):
        if combinator in schema:
            return " | ".join(type_text(branch) for branch in schema[combinator])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    words = []
    for each in kinds:
        if each == "array":
            words.append(f"list of {type_text(schema.get('items') or {})}")
        elif each == "object":
            words.append("mapping")
        else:
            words.append(str(each))
    return " | ".join(words) or "any"


def _setting_lines(key: str, schema: dict[str, JsonValue], required: set[str], indent: str) -> list[str]:
    default = "required" if key in required else "no default"
    if "default" in schema:
        default = f"default {json.dumps(schema['default'])}"
    operational = ""
    if schema.get(NOT_RESULTS_DEFINING) is False:
        operational = f"; changing it {schema.get(ON_CHANGE, 'reruns nothing')}"
    lines = [f"{indent}{key}: {type_text(schema)}, {default}{operational}"]
    description = " ".join(str(schema.get("description") or "").split())
    if description:
        lines.append(f"{indent}    {description}")
    for sub_key, sub in (schema.get("properties") or {}).items():  # an object's own settings: dotted keys
        lines += _setting_lines(f"{key}.{sub_key}", sub, set(schema.get("required") or []), indent)
    return lines


def list_benchmarks() -> int:
    """The table of benchmarks; a benchmark whose schema.yaml is broken is listed with `?` and its refusal after the
    table (exit 1), the others as always."""
    refusals = schema_refusals()
    rows = [("benchmark", "package", "schema", "python (default)", "suites", "tasks")]
    for name in registry.names():
        known = None if name in refusals else registry.adapter(name).known_suites()  # its settings: from its schema
        python = "?" if name in refusals else json.dumps(section_properties(name).get("python", {}).get("default"))
        rows.append(
            (
                name,
                registry.package(name),
                _shown_path(registry.schema_file(name)),
                python,
                str(len(known)) if known is not None else "?",
                str(sum(known.values())) if known is not None else "?",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(
        "\npython: the default of benchmarks.<name>.python, where the simulator runs (null: the workflow's own "
        "interpreter); a config sets it (config/libero.yaml: .venv-libero/bin/python). tasks: over all suites."
    )
    for refusal in refusals.values():
        print(f"evalwf benchmark list: {refusal}", file=sys.stderr)
    return 1 if refusals else 0


def show_benchmark(name: str) -> int:
    refusal = schema_refusals().get(name)
    if refusal is not None:
        print(f"evalwf benchmark show: {refusal}", file=sys.stderr)
        return 2
    schema = config_schema()["$defs"][name]
    description = " ".join(str(registry.section_schema(name).get("description") or "").split())
    print(f"{name} ({registry.package(name)}): {description}".rstrip(": "))
    print(
        f"settings of benchmarks.{name} from {_shown_path(registry.schema_file(name))} and the keys every benchmark "
        "has (evalwf/plan/config.schema.yaml, $defs.benchmark_common); the schema is the only source of "
        "defaults\n"
    )
    required = set(schema.get("required") or [])
    for key, sub in schema["properties"].items():
        print("\n".join(_setting_lines(key, sub, required, "  ")))
    return 0


def _unconfigured_section(name: str) -> SectionDocument:
    """What `check NAME` without a config checks: the schema's defaults, and for the keys only a campaign gives
    (its size, its suites) the smallest values, which no node check reads: the settings need every key."""
    given: SectionDocument = {"episodes_per_task": 1, "batch_size": 1}
    if "suites" in section_properties(name):
        given["suites"] = {suite: "all" for suite in registry.adapter(name).known_suites() or {}}
    return validate_section(name, given)


def _section(name: str, configfiles: list[str]) -> SectionDocument:
    """NAME's section of the composed config files, validated on its own: its simulator does not depend on a
    policy, so a benchmark file alone (config/<name>.yaml, which names none) can be checked."""
    if not configfiles:
        return _unconfigured_section(name)
    sections = benchmark_sections(*configfiles)
    if name not in sections:
        raise ConfigError(
            f"{', '.join(configfiles)}: no benchmarks.{name} section (configured: {', '.join(sections) or 'none'})"
        )
    return sections[name]


def check_benchmark(name: str, configfiles: list[str]) -> int:
    try:
        section = _section(name, configfiles)
    except (ConfigError, OSError) as error:
        print(f"evalwf benchmark check: {error}", file=sys.stderr)
        return 2
    results = node_probe.check_benchmark(name, section)
    for result in results:
        print(result.line(), flush=True)
    if not node_probe.node_ready(results):
        print(f"{name}: FAILED", file=sys.stderr)
        return 1
    print(f"{name}: OK (its jobs can run on this node)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        description="The registered benchmarks, their settings and their simulator environments.",
        formatter_class=formatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser(
        "list",
        help="each registered benchmark: package, schema, default interpreter, suites and tasks it knows",
        description="Each benchmark registered in benchmarks/registry.py.",
        formatter_class=formatter,
    )
    show = commands.add_parser(
        "show",
        help="every setting of a benchmark's config section: key, type, default, description (from its schema)",
        description="The settings of benchmarks.NAME in a campaign config, from the schema (the only source of "
        "defaults).",
        formatter_class=formatter,
    )
    show.add_argument("name", metavar="NAME", choices=registry.names(), help="a registered benchmark")
    check = commands.add_parser(
        "check",
        help="the benchmark's jobs can run on this node (its interpreter, simulator, renderer, assets): OK or the fix",
        description="Resolve benchmarks.NAME.python as the workflow does and run NAME's node checks there (the job "
        "code imports; the adapter's simulator, renderer and asset checks), as `evalwf doctor` and the workers do. "
        "Exit 0: OK, 1: a check failed (each printed with its fix), 2: a bad config.",
        formatter_class=formatter,
    )
    check.add_argument("name", metavar="NAME", choices=registry.names(), help="a registered benchmark")
    check.add_argument(
        "--configfile",
        nargs="+",
        default=[],
        metavar="FILE",
        help="campaign config(s), merged as snakemake does; without any, the schema's defaults",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        return list_benchmarks()
    if args.command == "show":
        return show_benchmark(args.name)
    return check_benchmark(args.name, args.configfile)


if __name__ == "__main__":
    sys.exit(main())
