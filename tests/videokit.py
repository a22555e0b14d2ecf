"""Reading back what a rollout video holds (the workflow only writes them: evalwf.benchmark.video)."""

from __future__ import annotations

from pathlib import Path


def count_frames(path: Path) -> tuple[int, tuple[int, int]]:
    """Decode a video: (number of frames, (height, width))."""
    import cv2

    capture = cv2.VideoCapture(str(path))
    count, shape = 0, (0, 0)
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            count, shape = count + 1, frame.shape[:2]
    finally:
        capture.release()
    return count, shape
