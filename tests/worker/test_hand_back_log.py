"""A worker's "handed back" log line is a promise that the queue already has the task back: a reader (a user, an
outside harness, a test) who sees it and then asks the queue must find the task pending, never still claimed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from evalwf.worker import task_run
from evalwf.worker.task_run import TaskRun


class RecordingReports:
    """Stands in for QueueReports: notes how many log lines existed when the unclaim reached the queue."""

    def __init__(self, lines: list[str], accepted: bool):
        self.lines, self.accepted = lines, accepted
        self.lines_before_unclaim: int | None = None

    def report(self, client: Any, claim: Any, action: str, **kwargs: Any) -> bool:
        assert action == "unclaim"
        self.lines_before_unclaim = len(self.lines)
        return self.accepted


def bare_task_run(reports: RecordingReports) -> TaskRun:
    run = TaskRun.__new__(TaskRun)
    run.foreign, run.reports = set(), reports
    run.status = SimpleNamespace(count=lambda _key: None)
    return run


@pytest.mark.parametrize("accepted", [True, False], ids=["queue-took-it", "queue-did-not-answer"])
def test_the_hand_back_line_follows_the_queues_answer(monkeypatch, accepted):
    lines: list[str] = []
    monkeypatch.setattr(task_run, "log", lines.append)
    reports = RecordingReports(lines, accepted)
    claim = SimpleNamespace(task=SimpleNamespace(id="t_1"))
    bare_task_run(reports).hand_back_foreign(None, claim, 0, "/elsewhere", None)
    back = [i for i, line in enumerate(lines) if "t_1" in line]
    assert back and reports.lines_before_unclaim is not None and back[0] >= reports.lines_before_unclaim, lines
    if accepted:
        assert "handed task t_1 back uncharged: campaign /elsewhere is not served by this worker" in lines[-1]
    else:
        assert "not handed back" in lines[-1] and "lease expiry" in lines[-1], lines
