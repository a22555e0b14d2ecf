"""What upstream's play_once leaves on the env that its check_success reads (tasks.PLAY_ONCE_STATE).

Upstream's loop runs setup_demo + play_once (the expert check) for a seed right before that seed's policy
episode, on the same env object, so attributes play_once sets are still there when the policy's actions are
checked. The manifest builder captures them after the accepted expert run and the batch evaluator restores them
after the policy episode's setup_demo, with the same value AND type (an upstream ArmTag, a numpy float32), so
check_success computes exactly what it computes upstream.

Encoded as {"type": "<module>.<class>", "value": <JSON scalar>}; decoding calls the class on the value. Only
Python scalars, numpy scalars and classes defined in the checkout's `envs` package are accepted, and a capture
that does not decode to an equal value of the same type is refused when the manifest is built.
"""

from __future__ import annotations

import importlib
from typing import Any, TypedDict

import numpy as np

from evalwf.common.errors import ManifestError

_BUILTINS = {"builtins.bool": bool, "builtins.int": int, "builtins.float": float, "builtins.str": str}


class EncodedValue(TypedDict):
    """One captured attribute as JSON: its class (numpy, builtins or envs.*) and the value it is rebuilt from."""

    type: str
    value: bool | int | float | str


def encode(value: Any) -> EncodedValue:
    cls = type(value)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(value, np.generic):
        payload: bool | int | float | str = value.item()
    elif isinstance(value, bool | int | float | str):
        payload = value
    else:
        payload = str(value)  # upstream's ArmTag: ArmTag(str(tag)) is tag
    return {"type": name, "value": payload}


def _resolve(name: str) -> type:
    if name in _BUILTINS:
        return _BUILTINS[name]
    module, _, attribute = name.rpartition(".")
    if module != "numpy" and module != "envs" and not module.startswith("envs."):
        raise ManifestError(f"play_once state of type {name} is not restorable (numpy, builtins or envs.* only)")
    cls = getattr(importlib.import_module(module), attribute, None)
    if not isinstance(cls, type) or (module == "numpy" and not issubclass(cls, np.generic)):
        raise ManifestError(f"play_once state of type {name}: no such class")
    return cls


def decode(encoded: EncodedValue) -> Any:
    """Rebuild a captured value (call inside checkout.activated(): envs.* classes come from the checkout)."""
    return _resolve(encoded["type"])(encoded["value"])


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


def capture(env: Any, names: tuple[str, ...], where: str) -> dict[str, EncodedValue]:
    """The named attributes as play_once left them; refuses what would not come back identical."""
    state = {}
    for name in names:
        if not hasattr(env, name):
            raise ManifestError(
                f"{where}: play_once set no attribute {name!r} (benchmarks/robotwin/tasks.py PLAY_ONCE_STATE says "
                "check_success reads it); is this checkout a RoboTwin stable_2.0?"
            )
        value = getattr(env, name)
        encoded = encode(value)
        if not _same(decode(encoded), value):
            raise ManifestError(f"{where}: play_once state {name}={value!r} does not survive JSON as {encoded}")
        state[name] = encoded
    return state


def restore(env: Any, names: tuple[str, ...], state: dict[str, EncodedValue] | None, where: str) -> None:
    """Put the captured attributes back on the env, as upstream's expert run for the same seed leaves them."""
    missing = [name for name in names if not state or name not in state]
    if missing:
        raise ManifestError(
            f"{where}: the manifest has no play_once state {', '.join(missing)} for this episode (check_success "
            "reads it); an older manifest lacks it: rebuild it (its definition changed, so rerunning "
            "snakemake plans a new one)"
        )
    for name in names:
        setattr(env, name, decode(state[name]))
