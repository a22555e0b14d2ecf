"""Deterministic per-episode seeds and isolated random generators.

An episode's seed is a pure function of what names the episode (benchmark, suite, task, index, base seed),
never of batch size, order or any RNG state left by earlier code. Generators built here never touch the
global numpy or Python random state.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

SEED_MODULUS = 2**31 - 1


def derive_seed(*parts: object) -> int:
    """Map the parts naming a thing (e.g. a benchmark, 'suite_a', 'task_0', 3, base_seed) to a 31-bit seed."""
    text = "\x1f".join(repr(p) for p in parts)
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def isolated_rng(*parts: object) -> np.random.Generator:
    """A generator for one domain (setup, rollout, instruction) of one episode."""
    return np.random.Generator(np.random.PCG64(derive_seed(*parts)))


@contextmanager
def preserved_global_rng() -> Iterator[None]:
    """Run code that must use the global numpy/Python RNG (simulators do) without disturbing the caller's."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
