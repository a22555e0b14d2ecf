"""msgpack with numpy arrays, in the openpi wire format (so any openpi server or client interoperates)."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

# What the openpi wire carries (msgpack with numpy arrays and scalars), nested: any value of a message
WireValue = (
    np.ndarray | np.generic | None | bool | int | float | str | bytes | list["WireValue"] | dict[str, "WireValue"]
)
# One message: a request (an observation: camera images, state, prompt, the episode's key), a reply ("actions" and
# what the server adds), or a server's metadata
Message = dict[str, WireValue]


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "VOc":
            raise TypeError(f"cannot send numpy array of dtype {obj.dtype} over the policy protocol")
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _decode(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_decode, raw=False)
