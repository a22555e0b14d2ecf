"""Per-episode rollout videos (LIBERO: the agentview camera, upright; stand-in: a drawing of its state), written
with OpenCV, imported only when a video is written (LIBERO's simulator environment has it).

`record_video` (none | failures | all) in the benchmark's config decides which episodes get one; the file goes
next to the episode's batch result (batches/<suite>/<task>/videos/), is published atomically (temp file +
rename) and its size is bounded: at most MAX_FRAMES frames (longer episodes keep every k-th frame, the frame
rate lowered to match) of at most MAX_SIDE pixels a side.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from evalwf.benchmark.adapter import BatchContext
from evalwf.common.json_types import JsonObject

FPS = 20  # LIBERO's control frequency (the default frame rate)
MAX_FRAMES = 300  # a 520-step libero_10 episode keeps every 2nd frame
MAX_SIDE = 128  # 256x256 renders are halved: about 100-300 kB per episode


def should_record(mode: str, success: bool) -> bool:
    """`record_video` (none | failures | all, the schema's enum) for an episode that did or did not succeed."""
    return mode == "all" or (mode == "failures" and not success)


def save_episode_video(
    ctx: BatchContext[Any], mode: str, name: str, success: bool, frames: list[np.ndarray]
) -> JsonObject:
    """Write an episode's frames when `mode` asks for it, as <name>-success.mp4 / <name>-failure.mp4 in the batch's
    video directory (BatchContext.video_dir, else <artifacts>/videos); the episode record's extra fields for it."""
    if not frames or not should_record(mode, success):
        return {}
    directory = Path(ctx.video_dir or Path(ctx.artifacts_dir) / "videos")
    path = write_video(frames, directory / f"{name}-{'success' if success else 'failure'}.mp4")
    return {"video": str(path), "video_frames": len(frames)}


def bounded(frames: list[np.ndarray], max_frames: int = MAX_FRAMES, max_side: int = MAX_SIDE) -> tuple[list, int]:
    """(frames to write, stride): every stride-th frame, downscaled by an integer factor to <= max_side."""
    stride = max(1, math.ceil(len(frames) / max_frames))
    kept = frames[::stride]
    scale = max(1, math.ceil(max(kept[0].shape[:2]) / max_side))
    return [np.ascontiguousarray(f[::scale, ::scale]) for f in kept], stride


def write_video(
    frames: list[np.ndarray], path: Path, max_frames: int = MAX_FRAMES, max_side: int = MAX_SIDE, fps: float = FPS
) -> Path:
    """Write RGB uint8 frames as an mp4 (mp4v) atomically; returns the path."""
    import cv2

    if not frames:
        raise ValueError(f"no frames to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept, stride = bounded(frames, max_frames, max_side)
    height, width = kept[0].shape[:2]
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps / stride, (width, height))
    if not writer.isOpened():
        raise OSError(f"cannot open a video writer for {tmp}")
    try:
        for frame in kept:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    tmp.replace(path)
    return path
