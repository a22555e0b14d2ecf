"""Dotted paths into nested observation dicts ('joint_action.vector'), as policy mappings name their keys."""

from __future__ import annotations

from typing import Any


def lookup_path(observation: dict[str, Any], path: str, what: str) -> Any:
    """observation['joint_action']['vector'] for 'joint_action.vector'; a KeyError naming `what`, the path and the
    missing part when absent."""
    value: Any = observation
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"{what} has no {path!r} (missing {part!r})")
        value = value[part]
    return value
