"""A gallery of failed episodes per task for the report: what a researcher looks at first after the numbers.

Recorded rollout videos (record_video: failures | all) are MP4 files next to their batch; the report cannot
attach an unknown number of files, and browsers do not play the MP4 codec OpenCV writes. So the gallery shows,
for up to GALLERY_PER_TASK failed episodes of each task, a strip of frames taken from the video (first, middle,
last) inlined as a PNG, with the episode, its seed and the path of the full video. Size stays bounded.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from itertools import islice
from pathlib import Path

import numpy as np

from evalwf.report.stats import TaskTally

GALLERY_PER_TASK = 3
STRIP_FRAMES = 3


@dataclass(frozen=True)
class FailedEpisode:
    suite: str
    task: str
    index: int
    seed: int
    steps: int
    video: Path


def failed_episodes(tallies: Iterable[TaskTally], per_task: int = GALLERY_PER_TASK) -> list[FailedEpisode]:
    """Failed episodes whose recorded video exists, at most `per_task` per task, in episode order: from the records
    the tally kept while validating the batch files (TaskTally.recorded_failures), so no batch file is read again."""
    found: list[FailedEpisode] = []
    for tally in tallies:
        episodes = (
            FailedEpisode(tally.suite, tally.task, record["index"], record["seed"], record["steps"],
                          Path(record["extra"]["video"]))
            for record in tally.recorded_failures
        )  # fmt: skip
        found.extend(islice((episode for episode in episodes if episode.video.exists()), per_task))
    return found


def frame_strip(video: Path, count: int = STRIP_FRAMES) -> bytes | None:
    """PNG of `count` frames side by side (first, ..., last) decoded from `video`; None if it cannot be read."""
    import cv2

    capture = cv2.VideoCapture(str(video))
    frames = []
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(frame)
    finally:
        capture.release()
    if not frames:
        return None
    picks = sorted({round(i * (len(frames) - 1) / max(1, count - 1)) for i in range(count)})
    ok, encoded = cv2.imencode(".png", np.concatenate([frames[i] for i in picks], axis=1))
    return encoded.tobytes() if ok else None


def gallery_html(episodes: list[FailedEpisode], per_task: int = GALLERY_PER_TASK) -> str:
    """The report section: per task, its failed episodes as frame strips with the path of each full video."""
    if not episodes:
        return ""
    parts = [
        "<h3>Failed episodes</h3>",
        f"<p>Up to {per_task} failed episodes per task with a recorded video (first, middle and last frame); "
        "the full videos are the MP4 files named below each strip.</p>",
    ]
    current = None
    for episode in episodes:
        if (episode.suite, episode.task) != current:
            current = (episode.suite, episode.task)
            parts.append(f"<h4>{escape(episode.suite)} / {escape(episode.task)}</h4>")
        strip = frame_strip(episode.video)
        caption = f"episode {episode.index} (seed {episode.seed}, {episode.steps} steps): {episode.video}"
        image = (
            f'<img alt="{escape(caption)}" style="max-width:100%" '
            f'src="data:image/png;base64,{base64.b64encode(strip).decode("ascii")}"/>'
            if strip
            else "<p>(video unreadable)</p>"
        )
        parts.append(f'<figure class="evalwf-failure">{image}<figcaption>{escape(caption)}</figcaption></figure>')
    return "\n".join(parts) + "\n"
