"""The type of a JSON document's values: what a validated config section, a manifest definition and the free-form
parts of records hold once parsed, precisely (never an object JSON cannot carry). Standard library only, Python
3.10 (the light core)."""

from __future__ import annotations

from typing import Union

JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]  # noqa: UP007 (3.10)
JsonObject = dict[str, JsonValue]
