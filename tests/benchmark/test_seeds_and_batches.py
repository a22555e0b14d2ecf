from __future__ import annotations

import random

import numpy as np
import pytest

from evalwf.benchmark.batches import EpisodeRange, plan_batches
from evalwf.benchmark.seeds import derive_seed, isolated_rng, preserved_global_rng


def test_plan_batches_covers_every_episode_once():
    for total in (1, 7, 50, 100):
        for size in {1, 3, 5, total}:
            if size > total:
                continue
            batches = plan_batches(total, size)
            indices = [i for b in batches for i in b.indices()]
            assert indices == list(range(total))
            assert all(b.count == size for b in batches[:-1])


@pytest.mark.parametrize(("total", "size"), [(0, 1), (5, 0), (5, 6)])
def test_plan_batches_rejects_bad_sizes(total, size):
    with pytest.raises(ValueError):
        plan_batches(total, size)


def test_label():
    assert EpisodeRange(45, 5).label == "0045-5"


def test_seeds_depend_only_on_names():
    assert derive_seed("standin", "alpha", "reach", 3, 0) == derive_seed("standin", "alpha", "reach", 3, 0)
    assert derive_seed("standin", "alpha", "reach", 3, 0) != derive_seed("standin", "alpha", "reach", 4, 0)
    assert 0 <= derive_seed("x") < 2**31 - 1


def test_isolated_rng_leaves_global_state_alone():
    np.random.seed(123)
    random.seed(123)
    expected_np, expected_py = np.random.get_state()[1].copy(), random.getstate()
    isolated_rng("a", 1).uniform(size=10)
    assert (np.random.get_state()[1] == expected_np).all()
    assert random.getstate() == expected_py


def test_preserved_global_rng_restores_state():
    np.random.seed(5)
    random.seed(5)
    before_np, before_py = np.random.get_state()[1].copy(), random.getstate()
    with preserved_global_rng():
        np.random.seed(99)
        np.random.uniform(size=3)
        random.random()
    assert (np.random.get_state()[1] == before_np).all()
    assert random.getstate() == before_py
