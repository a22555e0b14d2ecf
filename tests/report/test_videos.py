"""Rollout videos: the writer's size bound and frame count, and the stand-in's record_video modes end to end."""

from __future__ import annotations

import numpy as np
from conftest import standin_config
from runkit import fabricate_run  # noqa: F401  (puts tests/ on the path like the other reporting tests)
from videokit import count_frames

from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter
from evalwf.benchmark.batches import EpisodeRange
from evalwf.benchmark.video import MAX_FRAMES, write_video
from evalwf.plan.config import validate_config
from evalwf.plan.manifest import seal_manifest


def test_writer_bounds_frames_and_size(tmp_path):
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for _ in range(2 * MAX_FRAMES + 10)]
    path = write_video(frames, tmp_path / "v" / "long.mp4")
    count, shape = count_frames(path)
    assert count == len(frames[::3]) and count <= MAX_FRAMES, "every 3rd frame of 610 kept"
    assert shape == (128, 128)
    assert [p.name for p in path.parent.iterdir()] == ["long.mp4"], "no temporary file left"


class ScriptedPolicy:
    """Moves straight to the goal (success) for tasks named in `solves`, stands still otherwise (failure)."""

    def __init__(self, solves: set[str], task: str):
        self.solve = task in solves

    def infer(self, obs):
        direction = obs["observation/goal"] - obs["observation/state"]
        steps = max(1, int(np.ceil(np.abs(direction).max() / 0.2)))  # every coordinate arrives at that step
        action = direction / (0.2 * steps) if self.solve else np.zeros(4)
        return {"actions": np.tile(action, (5, 1))}


def run_standin(tmp_path, task: str, mode: str, solves: set[str]):
    config = validate_config(standin_config(tmp_path, standin={"record_video": mode, "max_steps": 12}))
    adapter = get_adapter("standin")
    section = benchmark_settings("standin", config.section_settings("standin"))
    definition = adapter.manifest_definition(section, "alpha", task)
    path = tmp_path / f"{task}.json"
    manifest = seal_manifest(adapter, definition, "alpha", task, str(path), config.manifest_cache)
    ctx = BatchContext(
        TaskRef("standin", "alpha", task), EpisodeRange(0, 2), manifest, section, ScriptedPolicy(solves, task),
        tmp_path / "artifacts", print, video_dir=tmp_path / "batches" / task / "videos",
    )  # fmt: skip
    return list(adapter.evaluate_batch(ctx))


def test_standin_records_failures_only(tmp_path):
    failed = run_standin(tmp_path, "push", "failures", solves={"reach"})
    solved = run_standin(tmp_path, "reach", "failures", solves={"reach"})
    assert [r["success"] for r in failed] == [False, False] and all(r["success"] for r in solved)
    for record in failed:
        count, shape = count_frames(record["extra"]["video"])
        assert count == record["steps"] + 1 == record["extra"]["video_frames"] == 13 and shape == (64, 64)
    assert all("video" not in r["extra"] for r in solved)
    assert sorted(p.name for p in (tmp_path / "batches" / "push" / "videos").iterdir()) == [
        "episode000-failure.mp4",
        "episode001-failure.mp4",
    ]


def test_standin_all_and_none(tmp_path):
    solved = run_standin(tmp_path / "all", "reach", "all", solves={"reach"})
    assert all(count_frames(r["extra"]["video"])[0] == r["steps"] + 1 for r in solved)
    quiet = run_standin(tmp_path / "none", "push", "none", solves=set())
    assert all("video" not in r["extra"] for r in quiet) and not (tmp_path / "none" / "batches").exists()
