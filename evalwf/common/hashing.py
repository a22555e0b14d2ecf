"""Stable content hashes: the same object always hashes the same, whatever the key order."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal objects give equal bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def short_hash(obj: Any, length: int = 12) -> str:
    """A short content hash used in file names and identities."""
    return sha256_hex(obj)[:length]


def jsonable(value: Any) -> Any:
    """Plain JSON values for hashing or storing: numpy arrays and scalars become Python values (through their
    tolist(), so numpy need not be imported), tuples lists, keys strings, anything else its repr."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
