"""Load and validate a campaign config before any job runs; one clear message names the bad key."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import yaml

from benchmarks import registry
from evalwf.benchmark.adapter import benchmark_settings, get_adapter
from evalwf.common.code_paths import code_path_refusal
from evalwf.common.errors import ConfigError
from evalwf.common.json_types import JsonValue
from evalwf.plan.campaign_config import (
    SECTION_CAMPAIGN_KEYS,
    SECTION_POLICY_KEYS,
    TOP_POLICY_KEYS,
    AdaptiveConfig,
    BenchmarkConfig,
    CampaignConfig,
    ConfigDocument,
    SectionDocument,
    section_settings,
)
from evalwf.policy.command_template import check_command_template
from evalwf.policy.schema import PolicyBlock, policy_schema
from evalwf.policy.spec import PolicySpec

__all__ = ["SECTION_CAMPAIGN_KEYS", "CampaignConfig", "load_config", "section_settings", "validate_config"]


def _read_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


# Benchmark -> why it is refused, as the last config_schema() found it (a broken schema.yaml refuses its own
# benchmark only); config_schema's cache and this table are cleared together (config_schema.cache_clear()).
_REFUSALS: dict[str, str] = {}


def schema_refusals() -> dict[str, str]:
    """Benchmark -> why it is refused (its schema.yaml is broken: the message names the file, line and column)."""
    config_schema()
    return dict(_REFUSALS)


@cache
def config_schema() -> dict[str, JsonValue]:
    """The main schema (evalwf/plan/config.schema.yaml) with the policy block's (evalwf/policy/policy.schema.yaml)
    and a `benchmarks` and a `reference` key per registered benchmark (benchmarks.registry), each section schema
    merged with the common benchmark keys. A benchmark whose schema.yaml is broken is left out (schema_refusals)."""
    text = resources.files("evalwf.plan").joinpath("config.schema.yaml").read_text(encoding="utf-8")
    schema = yaml.safe_load(text)
    schema["$defs"]["policy"] = policy_schema()
    common = schema["$defs"]["benchmark_common"]
    _REFUSALS.clear()
    for name in registry.names():
        try:
            section = {"type": "object", **registry.section_schema(name)}
            jsonschema.Draft202012Validator.check_schema(section)
        except registry.BrokenSchema as error:
            _REFUSALS[name] = str(error)
            continue
        except jsonschema.SchemaError as error:  # YAML, but no JSON schema: validating with it would crash
            key = ".".join(str(part) for part in error.absolute_path) or "<top level>"
            _REFUSALS[name] = (
                f"benchmark {name!r} is refused: its schema {registry.schema_file(name)}: key '{key}' is not valid "
                f"JSON schema ({error.message}); fix the file (the other benchmarks are not affected)"
            )
            continue
        section.pop("$schema", None)
        section["properties"] = {**common["properties"], **section.get("properties", {})}
        section["required"] = sorted(set(common["required"]) | set(section.get("required", [])))
        schema["$defs"][name] = section
        schema["properties"]["benchmarks"]["properties"][name] = {"$ref": f"#/$defs/{name}"}
        schema["properties"]["reference"]["properties"][name] = {"$ref": "#/$defs/reported_scores"}
    return schema


# Schema annotation of a benchmark key that does not change any episode's outcome (which tasks are planned, how
# episodes are batched, where a checkout lives, what is recorded on the side): changing it never reruns a batch.
NOT_RESULTS_DEFINING = "x-results-defining"
# What changing such a key does where it is more than nothing (`evalwf benchmark show` says it): a key the batch
# paths carry plans new batches, so the episodes it moves are evaluated again.
ON_CHANGE = "x-on-change"


def results_defining_settings(benchmark: str, section: SectionDocument) -> SectionDocument:
    """The part of a validated benchmark section that shapes episodes' outcomes: every key not annotated
    `x-results-defining: false` in the schema, minus host-local keys (leading "_")."""
    properties = config_schema()["$defs"][benchmark]["properties"]
    return {
        key: value
        for key, value in section.items()
        if not key.startswith("_") and properties.get(key, {}).get(NOT_RESULTS_DEFINING, True)
    }


def _with_defaults(validator_class: type) -> type:
    """A validator that fills in `default` values of object properties while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict, instance: Any, schema: dict) -> Any:
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema and key not in instance:
                    instance[key] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    where = _key_path(error)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        prefix = "" if where == "<top level>" else f"{where}."
        keys = ", ".join(f"'{prefix}{k}'" for k in unknown)
        return f"unknown config key {keys}; allowed keys here: {', '.join(allowed)}"
    if error.validator == "required" and where == "<top level>" and error.message.startswith("'run'"):
        return (
            "config key 'run' is missing: name the run (results go to <results_dir>/<run>/); in a composed campaign "
            "the policy file names it"
        )
    if error.validator == "required":
        return f"config key '{where}': {error.message}"
    alternatives = []
    if error.validator == "oneOf":
        alternatives = [branch.get("required", []) for branch in error.validator_value]
    if alternatives and all(len(keys) == 1 for keys in alternatives):  # exactly one of these keys
        given = [keys[0] for keys in alternatives if keys[0] in (error.instance or {})]
        prefix = "" if where == "<top level>" else f"{where}."
        names = " or ".join(f"'{prefix}{keys[0]}'" for keys in alternatives)
        return f"config key '{where}': give exactly one of {names} (given: {', '.join(given) or 'none'})"
    return f"config key '{where}': {error.message}"


def expand_policy_sweep(config: ConfigDocument) -> ConfigDocument:
    """`policy_sweep` (one command template over several checkpoints) as the `policies` it stands for."""
    sweep = config["policy_sweep"]
    if "{checkpoint}" not in sweep["command"]:
        raise ConfigError("invalid config: config key 'policy_sweep.command': it must contain {checkpoint}")
    shared = {key: sweep[key] for key in ("env", "startup_timeout_s", "infer_timeout_s") if key in sweep}
    policies = [
        {"name": name, "checkpoint": checkpoint, "command": sweep["command"].replace("{checkpoint}", checkpoint)}
        | shared
        for name, checkpoint in sweep["checkpoints"].items()
    ]
    expanded = {key: value for key, value in config.items() if key != "policy_sweep"}
    return {**expanded, "policies": policies}


def _given_policy(
    node: ConfigDocument | SectionDocument, keys: tuple[str, ...], where: str
) -> list[PolicyBlock] | None:
    """The policy blocks one place gives (a `policies` list, or the one `policy`), None when it gives none."""
    given = [key for key in keys if key in node]
    if len(given) > 1:
        names = " or ".join(f"'{where}{key}'" for key in keys)
        raise ConfigError(f"invalid config: give only one of {names} (given: {', '.join(given)})")
    if not given:
        return None
    return list(node["policies"]) if given[0] == "policies" else [node[given[0]]]


def _benchmark_policies(config: ConfigDocument) -> dict[str, list[PolicyBlock]]:
    """Benchmark -> the policy blocks that evaluate it, in config order: its section's own `policy` / `policies`,
    else the top-level ones (a validated config: `policy_sweep` is expanded into `policies` already)."""
    default = _given_policy(config, TOP_POLICY_KEYS, "") or []
    return {
        name: _given_policy(section, SECTION_POLICY_KEYS, f"benchmarks.{name}.") or default
        for name, section in config["benchmarks"].items()
    }


def _campaign_policy_blocks(config: ConfigDocument) -> list[PolicyBlock]:
    """Every policy that evaluates some benchmark of the campaign, once each (by name), in config order."""
    found: dict[str, PolicyBlock] = {}
    for blocks in _benchmark_policies(config).values():
        for block in blocks:
            found.setdefault(block["name"], block)
    return list(found.values())


def _campaign_baseline(config: ConfigDocument) -> str:
    """The policy the others are compared with where a benchmark's section names none: `baseline`, else the first
    policy in config order. Derived here and nowhere else: a schema default cannot name it (it depends on the
    policies), and validation does not write it into the config."""
    return config["baseline"] if "baseline" in config else _campaign_policy_blocks(config)[0]["name"]


def _benchmark_baseline(config: ConfigDocument, benchmark: str) -> str:
    """The policy the others are compared with on `benchmark`: its section's `baseline`, else the campaign's
    (campaign_baseline) when that policy evaluates it, else the first of its policies."""
    names = [block["name"] for block in _benchmark_policies(config)[benchmark]]
    section = config["benchmarks"][benchmark]
    chosen = section["baseline"] if "baseline" in section else _campaign_baseline(config)
    return chosen if chosen in names else names[0]


def _several_policies(config: ConfigDocument) -> bool:
    """A campaign of several policies (a `policies` list anywhere, or different policies for different
    benchmarks): its batches and summaries go to <results_dir>/<run>/<policy>/<benchmark>/."""
    lists = "policies" in config or any("policies" in section for section in config["benchmarks"].values())
    return lists or len(_campaign_policy_blocks(config)) > 1


# Names a policy may not take in a campaign of several policies: they are folders of <results_dir>/<run>/ already.
RESERVED_POLICY_NAMES = ("comparison", "logs", "campaign.yaml")


def _leave_out_policy_only_sections(config: ConfigDocument) -> None:
    """A section that holds nothing but policy keys comes from a policy file that names the policy of a
    benchmark this campaign does not configure (one file for several benchmarks): it evaluates nothing."""
    sections = config.get("benchmarks")
    if not isinstance(sections, dict):
        return
    kept = {
        name: section
        for name, section in sections.items()
        if not (isinstance(section, dict) and section and set(section) <= set(SECTION_CAMPAIGN_KEYS))
    }
    if sections and not kept:
        raise ConfigError(
            f"invalid config: no benchmark is configured: the config files give policies for {', '.join(sections)} "
            "but no benchmark settings; give a benchmark file first, e.g. --configfile "
            f"config/{next(iter(sections))}.yaml <policy file>"
        )
    config["benchmarks"] = kept


def _require_a_policy_per_benchmark(config: ConfigDocument) -> None:
    """A benchmark file holds the benchmark's settings only; its policy comes from a policy file (or a block)."""
    sections = config.get("benchmarks")
    if any(key in config for key in TOP_POLICY_KEYS) or not isinstance(sections, dict):
        return
    missing = [name for name, s in sections.items() if isinstance(s, dict) and not set(s) & set(SECTION_POLICY_KEYS)]
    if missing:
        example = " ".join(f"config/{name}.yaml" for name in missing)
        raise ConfigError(
            f"invalid config: no policy for benchmark(s) {', '.join(missing)}: a benchmark file holds the benchmark's "
            f"settings only; give a policy file after it, e.g. --configfile {example} config/policies/standin.yaml "
            f"(config/README.md, 'Composing config files'), or a top-level 'policy' or 'benchmarks.{missing[0]}.policy'"
        )


def _check_policies(config: ConfigDocument) -> None:
    """Every block a valid command template; one name, one block; in a campaign of several policies no name of a
    folder of the run; `baseline`s name a policy of theirs."""
    blocks: dict[str, tuple[PolicyBlock, str]] = {}
    places = [("", config, TOP_POLICY_KEYS)] + [
        (f"benchmarks.{name}.", section, SECTION_POLICY_KEYS) for name, section in config["benchmarks"].items()
    ]
    for where, node, keys in places:
        given = _given_policy(node, keys, where) or []
        label = where + next((key for key in keys if key in node), "")
        if "policies" in node:
            names = [block["name"] for block in given]
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ConfigError(
                    f"invalid config: config key '{where}policies': names must be unique (repeated: {duplicates})"
                )
        for index, block in enumerate(given):
            if block.get("command") is not None:  # an external server (policy.url) is not started by us
                check_command_template(
                    block["command"], f"{label}[{index}].command" if "policies" in node else f"{label}.command"
                )
            first = blocks.setdefault(block["name"], (block, label))
            if first[0] != block:
                raise ConfigError(
                    f"invalid config: policy name {block['name']!r} is given two different blocks (in '{first[1]}' "
                    f"and '{label}'): one name, one policy; rename one of them"
                )
    several = _several_policies(config)
    taken = sorted(set(blocks) & (set(RESERVED_POLICY_NAMES) | set(registry.names()))) if several else []
    if taken:
        raise ConfigError(
            f"invalid config: config key 'policies': {taken} is the name of a benchmark or a folder of the run; "
            "rename the policy"
        )
    if "baseline" in config and not several:
        raise ConfigError("invalid config: config key 'baseline': only with 'policies' (several policies)")
    if "baseline" in config and config["baseline"] not in blocks:
        raise ConfigError(f"invalid config: config key 'baseline': {config['baseline']!r} is not one of {list(blocks)}")
    for name, section in config["benchmarks"].items():
        if "baseline" not in section:
            continue
        own = [block["name"] for block in section.get("policies") or []]
        if section["baseline"] not in own:
            raise ConfigError(
                f"invalid config: config key 'benchmarks.{name}.baseline': only with 'benchmarks.{name}.policies', "
                f"naming one of them (given {section['baseline']!r}, policies: {own or 'none'})"
            )


def _check_adaptive(config: ConfigDocument) -> None:
    """Rounds need a sweep, batches that each lie in one round, and more than one round."""
    if "adaptive" not in config:
        return
    if not _several_policies(config):
        raise ConfigError(
            "invalid config: config key 'adaptive': only for a sweep of several policies ('policies' or "
            "'policy_sweep'); remove it to evaluate one policy"
        )
    adaptive = config["adaptive"]
    rounds = adaptive["round_episodes"]
    for name, blocks in _benchmark_policies(config).items():
        if len(blocks) < 2:
            continue  # one policy evaluates it: nothing to compare, it runs in full
        section = config["benchmarks"][name]
        episodes, batch = section["episodes_per_task"], section["batch_size"]
        if not isinstance(batch, int):
            raise ConfigError(
                f"invalid config: config key 'benchmarks.{name}.batch_size': auto sizes are not for a benchmark an "
                "adaptive sweep evaluates in rounds (every batch must lie in one round); give a number that divides "
                f"adaptive.round_episodes ({rounds})"
            )
        if rounds % batch:
            raise ConfigError(
                f"invalid config: config key 'adaptive.round_episodes': {rounds} is not a multiple of "
                f"benchmarks.{name}.batch_size ({batch}): every batch must lie in one round; use a multiple of it"
            )
        if rounds >= episodes:
            raise ConfigError(
                f"invalid config: config key 'adaptive.round_episodes': {rounds} leaves a single round of "
                f"benchmarks.{name}.episodes_per_task ({episodes}): nothing could stop early; use fewer"
            )
        if adaptive["min_episodes"] >= episodes:
            raise ConfigError(
                f"invalid config: config key 'adaptive.min_episodes': {adaptive['min_episodes']} is not less than "
                f"benchmarks.{name}.episodes_per_task ({episodes}): no decision could ever be taken; use fewer"
            )


def _check_batch_size(name: str, section: SectionDocument) -> None:
    """A batch holds at least one of the task's episodes: a fixed size or auto's `min` is no larger than them."""
    episodes, batch = section["episodes_per_task"], section["batch_size"]
    key = f"config key 'benchmarks.{name}.batch_size"
    if isinstance(batch, int) and batch > episodes:
        raise ConfigError(
            f"invalid config: {key}': {batch} is larger than benchmarks.{name}.episodes_per_task ({episodes})"
        )
    if isinstance(batch, dict):
        auto = batch["auto"]
        if auto["min"] > episodes:
            raise ConfigError(
                f"invalid config: {key}.auto.min': {auto['min']} is larger than benchmarks.{name}.episodes_per_task "
                f"({episodes})"
            )
        if auto["max"] is not None and auto["max"] < auto["min"]:
            raise ConfigError(
                f"invalid config: {key}.auto.max': {auto['max']} is less than its min ({auto['min']}); raise max or "
                "lower min"
            )


BATCH_SIZE_FORMS = "a number of episodes, or {auto: {workers: W}} (optional min, max: episodes per batch)"


def _batch_size_hint(error: jsonschema.ValidationError) -> str:
    """What batch_size may be, after a schema error about it (a oneOf's own message names neither form)."""
    path = list(error.absolute_path)
    return f"; batch_size is {BATCH_SIZE_FORMS}" if "batch_size" in path else ""


def _refuse_broken_benchmarks(config: ConfigDocument) -> None:
    """A configured benchmark whose schema.yaml is broken is refused with its file, line and column (the schema
    leaves it out, which alone would read as an unknown key)."""
    sections = config.get("benchmarks")
    refusals = schema_refusals()
    for name in sections if isinstance(sections, dict) else ():
        if name in refusals:
            raise ConfigError(f"invalid config: config key 'benchmarks.{name}': {refusals[name]}")


def validate_config(raw: Mapping[str, Any] | CampaignConfig | None) -> CampaignConfig:
    """Validate a config (the user's dict, or a CampaignConfig again), fill defaults, and run each benchmark's
    semantic checks.

    Returns the frozen CampaignConfig (the caller's dict is not changed); raises ConfigError with one message naming
    the offending key.
    """
    if not raw:
        raise ConfigError("empty config: pass one with --configfile config/<name>.yaml (see config/README.md)")
    config = raw.document() if isinstance(raw, CampaignConfig) else copy.deepcopy(dict(raw))
    _leave_out_policy_only_sections(config)
    _refuse_broken_benchmarks(config)
    _require_a_policy_per_benchmark(config)
    _given_policy(config, TOP_POLICY_KEYS, "")  # at most one of them
    validator = _with_defaults(jsonschema.Draft202012Validator)(config_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(list(e.absolute_path)), str(e.message)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"invalid config: {_describe(best)}{_batch_size_hint(best)}")
    if "policy_sweep" in config:
        return validate_config(expand_policy_sweep(config))
    _check_policies(config)
    _check_adaptive(config)
    for name, section in config["benchmarks"].items():
        _check_batch_size(name, section)
        # unknown suites / tasks raise ConfigError naming the key
        get_adapter(name).expand(benchmark_settings(name, section_settings(section)))
    return _campaign_config(config)


def _campaign_config(config: ConfigDocument) -> CampaignConfig:
    """The frozen value of a validated config document: the policies, baselines and adaptive block derived once."""
    specs = {block["name"]: PolicySpec.from_config(block) for block in _campaign_policy_blocks(config)}
    benchmarks = {
        name: BenchmarkConfig(
            name=name,
            policies=tuple(specs[block["name"]] for block in blocks),
            baseline=_benchmark_baseline(config, name),
            episodes_per_task=config["benchmarks"][name]["episodes_per_task"],
            batch_size=config["benchmarks"][name]["batch_size"],
            _settings=MappingProxyType(section_settings(config["benchmarks"][name])),
        )
        for name, blocks in _benchmark_policies(config).items()
    }
    return CampaignConfig(
        run=config["run"],
        results_dir=config["results_dir"],
        manifest_cache=config["manifest_cache"],
        benchmarks=MappingProxyType(benchmarks),
        policies=tuple(specs.values()),
        baseline=_campaign_baseline(config),
        several_policies=_several_policies(config),
        adaptive=AdaptiveConfig.of(config["adaptive"]) if "adaptive" in config else None,
        reference=MappingProxyType(copy.deepcopy(config["reference"])),
        _document=MappingProxyType(config),
    )


def validate_section(benchmark: str, section: SectionDocument) -> SectionDocument:
    """One benchmark's section validated and completed with its schema's defaults, as in a campaign config: for
    callers that build a section by hand (timing tools, tests). Raises ConfigError naming the key."""
    wrapped = {"run": "section", "policy": {"name": "none", "url": "ws://none:1"}, "benchmarks": {benchmark: section}}
    return validate_config(wrapped).document()["benchmarks"][benchmark]  # type: ignore[index,return-value]


def benchmark_sections(*paths: str | Path) -> dict[str, SectionDocument]:
    """Each benchmark's settings in the composed config files, validated on its own with its schema's defaults and
    without its policies: what a benchmark's simulator depends on, which a benchmark file alone gives (a section
    holding only policy keys configures no benchmark)."""
    sections = read_config_files(*paths).get("benchmarks") or {}
    if not isinstance(sections, dict):
        raise ConfigError("invalid config: config key 'benchmarks' must be a mapping of benchmark sections")
    return {
        name: section_settings(validate_section(name, section))
        for name, section in sections.items()
        if not (isinstance(section, dict) and section and set(section) <= set(SECTION_CAMPAIGN_KEYS))
    }


def gives_a_policy(*paths: str | Path) -> bool:
    """Whether the composed config files name any policy (a benchmark file alone does not)."""
    merged = read_config_files(*paths)
    sections = merged.get("benchmarks") if isinstance(merged.get("benchmarks"), dict) else {}
    in_sections = any(isinstance(s, dict) and set(s) & set(SECTION_POLICY_KEYS) for s in sections.values())
    return in_sections or any(key in merged for key in TOP_POLICY_KEYS)


def load_config(*paths: str | Path, overrides: Mapping[str, Any] | None = None) -> CampaignConfig:
    """Read YAML files, merged (read_config_files: files that disagree are refused), apply `overrides` (snakemake's
    --config: they may override anything), and validate."""
    merged = read_config_files(*paths)
    if overrides:
        _deep_update(merged, dict(overrides))
    return validate_config(merged)


def read_config_files(*paths: str | Path) -> ConfigDocument:
    """The config files merged key by key, unvalidated. They compose (a file per benchmark, one per policy), so a
    key set by two files to different values is refused naming both files, instead of the later one silently
    winning (two benchmark files each with its policy would otherwise evaluate both with the last one). A policy
    block is one value: two files that both give the policy of one place must give the same block. A missing file
    or a YAML syntax error is named with its file and line (Snakemake's own message for these, printed before the
    workflow runs, is a traceback: `evalwf plan --configfile ...` gives this one)."""
    merged: dict[str, JsonValue] = {}
    origins: dict[tuple[str, ...], str] = {}
    for path in paths:
        refusal = code_path_refusal(path, "config file")  # it names the policy command that workers run
        if refusal is not None:
            raise ConfigError(refusal)
        try:
            data = _read_yaml(Path(path)) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
            problem = getattr(error, "problem", None) or str(error)
            raise ConfigError(f"config file {where}: YAML syntax error: {problem}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        _merge_file(merged, data, str(path), origins, ())
    return merged


def _policy_place(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The policy keys of the mapping at `keys` (top level, or a benchmark's section), () elsewhere."""
    if not keys:
        return TOP_POLICY_KEYS
    return SECTION_POLICY_KEYS if len(keys) == 2 and keys[0] == "benchmarks" else ()


def _shown(value: Any) -> str:
    if isinstance(value, dict) and "name" in value:
        return f"policy {value['name']!r}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _origin(origins: dict[tuple[str, ...], str], keys: tuple[str, ...]) -> str:
    """The file that set the value at `keys` (or the mapping it came in)."""
    while keys and keys not in origins:
        keys = keys[:-1]
    return origins.get(keys, "?")


def _merge_file(
    base: dict[str, JsonValue],
    new: dict[str, JsonValue],
    path: str,
    origins: dict[tuple[str, ...], str],
    keys: tuple[str, ...],
) -> None:
    exclusive = _policy_place(keys)
    for key, value in new.items():
        here = (*keys, key)
        dotted = ".".join(here)
        rivals = [
            other
            for other in exclusive
            if key in exclusive and other != key and other in base and _origin(origins, (*keys, other)) != path
        ]  # within one file, validation names them
        if rivals:
            other = (*keys, rivals[0])
            raise ConfigError(
                f"config keys '{'.'.join(other)}' (in {_origin(origins, other)}) and '{dotted}' (in {path}) both give "
                "the policy of the same benchmarks: keep one (config files compose; they must not disagree)"
            )
        if key not in base:
            base[key] = copy.deepcopy(value)
            origins[here] = path
        elif isinstance(value, dict) and isinstance(base[key], dict) and key not in exclusive:
            _merge_file(base[key], value, path, origins, here)
        elif base[key] != value:
            per_benchmark = (
                " (a policy per benchmark: benchmarks.<name>.policy)" if not keys and key in exclusive else ""
            )
            raise ConfigError(
                f"config key '{dotted}' is set to {_shown(base[key])} in {_origin(origins, here)} and {_shown(value)} "
                f"in {path}: config files compose (one per benchmark, one per policy) and must not disagree; set "
                f"it in one of them{per_benchmark}"
            )


def _deep_update(base: dict[str, JsonValue], new: Mapping[str, JsonValue]) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
