"""LIBERO rollout videos: the shared writer (evalwf.benchmark.video), kept importable under this name."""

from evalwf.benchmark.video import FPS, MAX_FRAMES, MAX_SIDE, count_frames, should_record, write_video

__all__ = ["FPS", "MAX_FRAMES", "MAX_SIDE", "count_frames", "should_record", "write_video"]
