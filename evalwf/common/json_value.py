"""The values a JSON or YAML document holds (configs, schemas, manifests, result records), as one precise type:
what a reader may meet at a key whose shape only a schema fixes, instead of `Any`."""

from __future__ import annotations

# null, boolean, number, string, array, object: recursively
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
