"""The report's gallery of failed episodes: a real local-profile stand-in run recording failures' videos."""

from __future__ import annotations

import base64
import json
import re

import cv2
import numpy as np
import pytest

from evalwf.report.gallery import GALLERY_PER_TASK

pytestmark = pytest.mark.slow


def test_summary_page_shows_up_to_three_failed_episodes_per_task(finished_standin_run):
    # the session's finished run (conftest.finished_standin_run): failures' videos recorded, tasks of two batches
    # each, so failures are gathered across batches, per task
    bench = finished_standin_run.benchmark_dir
    assert all(len(list(task.glob("*.json"))) == 2 for task in (bench / "batches").glob("*/*")), "two batches a task"
    failures: dict[str, list[int]] = {}
    for path in sorted((bench / "batches").rglob("*.json")):
        result = json.loads(path.read_text())
        failures.setdefault(result["task"], []).extend(e["index"] for e in result["episodes"] if not e["success"])
    assert any(failures.values()), "the stand-in policy (noise 1.2) fails some episodes"
    html = (bench / "summary.html").read_text()
    assert "<h3>Failed episodes</h3>" in html
    for task, indices in failures.items():
        shown = re.findall(rf"<figcaption>episode (\d+) \(seed \d+, \d+ steps\): \S*/{task}/videos/", html)
        assert [int(i) for i in shown] == sorted(indices)[:GALLERY_PER_TASK], task
    strip = re.search(r'src="data:image/png;base64,([^"]+)"/><figcaption>episode', html).group(1)
    image = cv2.imdecode(np.frombuffer(base64.b64decode(strip), np.uint8), cv2.IMREAD_COLOR)
    assert image.shape[1] == 3 * image.shape[0], "three frames side by side"
