"""Helpers the benchmarks share instead of each keeping a copy (found by a duplicate-code scan)."""

from __future__ import annotations

import numpy as np
import pytest

from evalwf.benchmark.video import save_episode_video
from evalwf.common.hashing import jsonable
from evalwf.common.observations import lookup_path


def test_jsonable_turns_numpy_into_plain_values():
    value = {1: (np.float32(0.5), np.arange(2)), "b": np.bool_(True), "o": object}
    assert jsonable(value) == {"1": [0.5, [0, 1]], "b": True, "o": repr(object)}
    assert type(jsonable(np.float64(1.5))) is float


def test_lookup_path_names_what_is_missing():
    assert lookup_path({"a": {"b": 3}}, "a.b", "x") == 3
    with pytest.raises(KeyError, match=r"RoboTwin observation has no 'a\.c' \(missing 'c'\)"):
        lookup_path({"a": {"b": 3}}, "a.c", "RoboTwin observation")


def test_episode_video_only_when_asked(tmp_path):
    class Ctx:
        video_dir, artifacts_dir = None, tmp_path

    frames = [np.zeros((8, 8, 3), np.uint8)] * 3
    assert save_episode_video(Ctx, "failures", "episode000", True, frames) == {}
    extra = save_episode_video(Ctx, "failures", "episode000", False, frames)
    assert extra == {"video": str(tmp_path / "videos" / "episode000-failure.mp4"), "video_frames": 3}
