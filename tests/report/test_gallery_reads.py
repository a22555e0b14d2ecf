"""The summary reads each batch file once: the gallery of failed episodes is built from what the tally kept.

Before, the gallery re-read and re-parsed every batch JSON after the tally had validated it, even when nothing
recorded a video (1400 extra reads per RoboTwin summary). Fabricated runs, with and without recorded videos.
"""

from __future__ import annotations

import builtins
import io
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from runkit import fabricate_run

from evalwf.benchmark.video import write_video
from evalwf.report.aggregate import summarize_benchmark

# reach always succeeds, push always fails, open fails its odd episodes
OUTCOMES = {"reach": lambda i: True, "push": lambda i: False, "open": lambda i: i % 2 == 0}


@pytest.fixture
def batch_reads(monkeypatch):
    """Opens for reading of JSON files under a `batches` folder, per resolved path (io.open and builtins.open:
    Path.read_text goes through io.open, a plain open() through builtins)."""
    reads: Counter[Path] = Counter()
    real_open = io.open

    def counting_open(file, *args, **kwargs):
        mode = args[0] if args else kwargs.get("mode", "r")
        if isinstance(file, str | os.PathLike) and not set(mode) & set("wax+"):
            path = Path(file)
            if path.suffix == ".json" and "batches" in path.parts:
                reads[path.resolve()] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    return reads


def batch_files(campaign) -> list[Path]:
    return sorted(path.resolve() for path in (campaign.benchmark_dir("standin") / "batches").rglob("*.json"))


def test_each_batch_is_read_once_and_the_gallery_comes_from_the_tally(tmp_path, batch_reads):
    videos = tmp_path / "videos"
    for task, indices in {"push": [1, 2, 3, 5], "open": [1, 3, 5]}.items():
        for i in indices:
            frames = [np.full((16, 16, 3), 40 * k, np.uint8) for k in range(5)]
            write_video(frames, videos / f"{task}{i}-failure.mp4")

    def recorded(suite, task, index):  # push 0: its video was deleted; push 4: none recorded
        if OUTCOMES[task](index) or (task, index) == ("push", 4):
            return {}
        return {"video": str(videos / f"{task}{index}-failure.mp4"), "video_frames": 5}

    campaign = fabricate_run(
        tmp_path,
        lambda suite, task, index: OUTCOMES[task](index),
        extra=recorded,
        standin={"episodes_per_task": 6, "batch_size": 3, "record_video": "failures"},
    )
    outputs = campaign.summary_paths("standin")
    batch_reads.clear()
    summarize_benchmark(campaign, "standin", outputs, echo=False)
    assert len(batch_files(campaign)) == 6
    assert dict(batch_reads) == dict.fromkeys(batch_files(campaign), 1), "each batch file read exactly once"
    html = Path(outputs["html"]).read_text(encoding="utf-8")
    assert "<h3>Failed episodes</h3>" in html
    heading, caption = r"<h4>(\w+) / (\w+)</h4>", r"<figcaption>episode (\d+) \(seed \d+, 7 steps\): (\S+)</figcaption>"
    shown = re.findall(f"{heading}|{caption}", html)
    sections = [(suite, task) for suite, task, _, _ in shown if suite]
    assert sections == [("alpha", "push"), ("beta", "open")], "tasks in campaign order, none without failures"
    captions = [(int(index), Path(video).name) for _, _, index, video in shown if index]
    assert captions == [(i, f"push{i}-failure.mp4") for i in (1, 2, 3)] + [
        (i, f"open{i}-failure.mp4") for i in (1, 3, 5)
    ], "up to three failed episodes per task whose video exists, in episode order"
    assert html.count('<figure class="evalwf-failure"><img ') == 6, "every strip decoded"


def test_no_gallery_reads_when_nothing_records_video(tmp_path, batch_reads):
    campaign = fabricate_run(
        tmp_path,
        lambda suite, task, index: OUTCOMES[task](index),
        standin={"episodes_per_task": 6, "batch_size": 3, "record_video": "none"},
    )
    outputs = campaign.summary_paths("standin")
    batch_reads.clear()
    summarize_benchmark(campaign, "standin", outputs, echo=False)
    assert dict(batch_reads) == dict.fromkeys(batch_files(campaign), 1), "the tally's reads only, none for a gallery"
    assert "Failed episodes" not in Path(outputs["html"]).read_text(encoding="utf-8")
