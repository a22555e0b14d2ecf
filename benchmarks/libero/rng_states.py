"""The numpy global RNG state before each trial's reset in openpi's sequential LIBERO loop.

LIBERO re-places some fixed scene objects (a cabinet, a stove, ...) from numpy's GLOBAL RNG at every hard
env.reset(), and set_init_state() does not undo it. openpi seeds once per task env (env.seed(7), which is
np.random.seed(7)) and runs trials 0, 1, 2, ... in order, so the scene of trial j depends on the j resets before
it. To reproduce that scene for any trial in any batch, the manifest records the state the sequential loop has
just before trial j's reset; the batch evaluator restores it before resetting.

Only resets move that RNG: set_init_state, the wait steps and the policy's rollout steps do not draw from it
(measured on 3 tasks of each of the five suites, see docs/libero.md; evaluate_batch re-checks it on every
trial). So the states are obtained by seeding once and resetting in order, without a policy, and they do not
depend on the policy. Computed once per (suite, task, seed, bddl file, package versions) and cached on disk; a
request for more trials than cached recomputes (a task's 50 resets take about 100 s).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from evalwf.benchmark.seeds import preserved_global_rng
from evalwf.common.atomic import atomic_write_text
from evalwf.common.hashing import sha256_hex

CACHE_ENV = "LIBERO_RNG_CACHE_DIR"
CACHE_FORMAT = "libero-rng-states-v1"


class EncodedRngState(TypedDict):
    """numpy's global MT19937 state as JSON (a LIBERO manifest episode's np_rng_state)."""

    bit_generator: str
    keys_b64: str  # base64 of the 624 keys, little-endian uint32
    pos: int
    has_gauss: int
    cached_gaussian: float
    sha256: str  # of the other fields: a corrupted manifest is refused


class _RngCacheKey(TypedDict):
    format: str
    suite: str
    task_id: int
    base_seed: int
    bddl_sha256: str
    versions: dict[str, str | None]


def encode_state(state: tuple[Any, ...]) -> EncodedRngState:
    """np.random.get_state() as JSON: MT19937 keys as base64 of little-endian uint32, plus a sha256."""
    name, keys, pos, has_gauss, cached_gaussian = state
    if name != "MT19937":
        raise ValueError(f"unexpected numpy global bit generator {name!r}")
    body = {
        "bit_generator": name,
        "keys_b64": base64.b64encode(np.asarray(keys, dtype="<u4").tobytes()).decode("ascii"),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }
    return {
        "bit_generator": name,
        "keys_b64": body["keys_b64"],
        "pos": body["pos"],
        "has_gauss": body["has_gauss"],
        "cached_gaussian": body["cached_gaussian"],
        "sha256": sha256_hex(body),
    }


def decode_state(encoded: EncodedRngState) -> tuple[Any, ...]:
    """The tuple np.random.set_state() takes; checks the recorded sha256."""
    body = {k: v for k, v in encoded.items() if k != "sha256"}
    if sha256_hex(body) != encoded.get("sha256"):
        raise ValueError("recorded numpy RNG state does not match its sha256 (corrupted manifest?)")
    keys = np.frombuffer(base64.b64decode(body["keys_b64"]), dtype="<u4").astype(np.uint32)
    if keys.size != 624:
        raise ValueError(f"recorded MT19937 state has {keys.size} keys, expected 624")
    return (body["bit_generator"], keys, body["pos"], body["has_gauss"], body["cached_gaussian"])


def global_state_digest() -> str:
    """A short fingerprint of numpy's current global RNG state (to check nothing moved it)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    digest = hashlib.sha256(np.asarray(keys, dtype="<u4").tobytes())
    digest.update(f"{name}/{int(pos)}/{int(has_gauss)}/{float(cached)!r}".encode())
    return digest.hexdigest()


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(sys.prefix) / "libero-cache" / "rng-states")


def _cache_key(suite: str, task_id: int, base_seed: int) -> _RngCacheKey:
    from benchmarks.libero import env as libero_env

    spec = libero_env.task_spec(suite, task_id)
    return {
        "format": CACHE_FORMAT,
        "suite": suite,
        "task_id": task_id,
        "base_seed": base_seed,
        "bddl_sha256": hashlib.sha256(spec.bddl_file.read_bytes()).hexdigest(),
        "versions": libero_env.package_versions(),
    }


def sequential_reset_states(
    suite: str, task_id: int, base_seed: int, count: int, log: Callable[[str], None] = print
) -> list[EncodedRngState]:
    """Encoded global RNG states before the resets of trials 0..count-1 of openpi's loop (cached)."""
    key = _cache_key(suite, task_id, base_seed)
    path = cache_dir() / f"{sha256_hex(key)[:24]}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached["key"] == key and len(cached["states"]) >= count:
            log(f"LIBERO {suite} task {task_id}: reset RNG states from cache {path}")
            return cached["states"][:count]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    states = _compute(suite, task_id, base_seed, count, log)
    try:
        atomic_write_text(path, json.dumps({"key": key, "states": states}))
    except OSError as exc:  # a read-only cache only costs time
        log(f"LIBERO: could not cache reset RNG states in {path}: {exc}")
    return states


def _compute(suite: str, task_id: int, base_seed: int, count: int, log: Callable[[str], None]) -> list[EncodedRngState]:
    from benchmarks.libero import env as libero_env

    spec = libero_env.task_spec(suite, task_id)
    log(f"LIBERO {suite} task {task_id}: recording the RNG state before each of {count} sequential resets")
    states = []
    with preserved_global_rng():
        env = libero_env.make_env(spec, libero_env.ENV_RESOLUTION)
        try:
            env.seed(base_seed)  # as openpi, right after creating the task's env
            for trial in range(count):
                states.append(encode_state(np.random.get_state()))
                if trial + 1 < count:
                    env.reset()  # trial's set_init_state and steps do not touch the global RNG
        finally:
            libero_env.close_env(env)
    return states
