"""The policy block's schema (policy.schema.yaml beside this module): what a policy block may say, with its
defaults. The campaign's schema takes it from here (evalwf.plan.config), so the defaults live in one file and the
policy part reads them without the plan (a simulator's interpreter reads them too)."""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def policy_schema() -> dict[str, Any]:
    text = resources.files("evalwf.policy").joinpath("policy.schema.yaml").read_text(encoding="utf-8")
    schema = yaml.safe_load(text)
    schema.pop("$schema", None)
    return schema


def policy_defaults() -> dict[str, Any]:
    """The default of every key of a policy block that has one: for a block the validator has not seen."""
    return {
        key: copy.deepcopy(sub["default"]) for key, sub in policy_schema()["properties"].items() if "default" in sub
    }
