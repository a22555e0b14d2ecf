"""The policy block's schema (policy.schema.yaml beside this module): what a policy block may say, with its
defaults. The campaign's schema takes it from here (evalwf.plan.config), so the defaults live in one file and the
policy part reads them without the plan (a simulator's interpreter reads them too)."""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import TypedDict

import yaml

from evalwf.common.json_types import JsonValue


class PolicyBlock(TypedDict, total=False):
    """A policy block as a config gives it (evalwf/policy/policy.schema.yaml: `command` or `url`, the rest with
    defaults) or a task carries it to its worker (its identity block: `external` instead of `url`)."""

    name: str
    command: str | None
    url: str | None
    external: bool
    env: dict[str, str | int | float | bool]
    startup_timeout_s: float
    infer_timeout_s: float
    protocol: str
    checkpoint: str | None
    max_batch: int | None
    max_wait_ms: float


@cache
def policy_schema() -> dict[str, JsonValue]:
    text = resources.files("evalwf.policy").joinpath("policy.schema.yaml").read_text(encoding="utf-8")
    schema = yaml.safe_load(text)
    schema.pop("$schema", None)
    return schema


def policy_defaults() -> PolicyBlock:
    """The default of every key of a policy block that has one: for a block the validator has not seen."""
    properties = policy_schema()["properties"]
    assert isinstance(properties, dict)
    defaults = {key: sub["default"] for key, sub in properties.items() if isinstance(sub, dict) and "default" in sub}
    return copy.deepcopy(defaults)
