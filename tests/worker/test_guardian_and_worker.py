"""Owned processes (kill -9 of an owner still kills its children) and the worker's task validation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from taskkit import standin_batch_task

from evalwf.worker.job_payload import TaskRefused, validate_task
from evalwf.worker.procfs import descendants

OWNER = textwrap.dedent(
    """
    import sys, time
    from evalwf.worker.processes import GuardedProcess
    # a command with a child of its own and a daemonised grandchild that leaves the process group
    script = "sleep 300 & setsid sleep 301 & sleep 302"
    guarded = GuardedProcess(["/bin/sh", "-c", script])
    print(guarded.pid, flush=True)
    time.sleep(600)
    """
)


def _gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in pids if os.path.exists(f"/proc/{pid}")}
        if not left:
            return set()
        time.sleep(0.1)
    return left


def test_kill_9_of_the_owner_kills_and_reaps_every_guarded_descendant():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        guardian = int(owner.stdout.readline())
        deadline = time.monotonic() + 20
        while len(descendants(guardian)) < 4 and time.monotonic() < deadline:  # sh + 3 sleeps
            time.sleep(0.05)
        doomed = descendants(guardian) | {guardian}
        assert len(doomed) >= 5
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert not _gone(doomed, 15), "guarded processes survived kill -9 of their owner"
    finally:
        if owner.poll() is None:
            owner.kill()


def _allowed(workdir: Path) -> list[str]:
    from conftest import REPO

    return [str(workdir), str(REPO)]


def test_worker_accepts_a_job_step_of_an_allowed_workflow(tmp_path):
    step = validate_task(standin_batch_task(tmp_path), _allowed(tmp_path))
    assert step.argv[0] == sys.executable and step.argv[1:3] == ["-m", "snakemake"]
    assert step.argv[step.argv.index("--mode") + 1] == "remote"
    assert step.workdir == str(tmp_path) and step.policy is not None and step.policy.name == "standin-policy"


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"command": "rm -rf / && python -m snakemake --mode remote"}, "keys a worker never takes"),
        ({"snakefile": "/etc/Snakefile"}, "Snakefile"),
        ({"outputs": []}, "not the outputs of its job"),
    ],
)
def test_worker_refuses_what_is_not_an_allowed_job_step(tmp_path, change, reason):
    with pytest.raises(TaskRefused, match=reason):
        validate_task(standin_batch_task(tmp_path, **change), _allowed(tmp_path))


def test_worker_refuses_a_workflow_directory_that_is_not_allowed(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    with pytest.raises(TaskRefused, match="not allowed"):
        validate_task(standin_batch_task(tmp_path / "elsewhere"), [str(allowed)])
    sibling = tmp_path / "allowed-not"
    with pytest.raises(TaskRefused, match="not allowed"):
        validate_task(standin_batch_task(sibling), [str(allowed)])


def test_cpu_render_threads_split_the_cores_between_job_slots(monkeypatch):
    import os

    from evalwf.worker import task_run as worker

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os.path, "exists", lambda path: False)  # no NVIDIA driver
    assert worker.cpu_render_threads({}, parallel_jobs=2) == {"LP_NUM_THREADS": "4"}
    assert worker.cpu_render_threads({}, parallel_jobs=16) == {"LP_NUM_THREADS": "1"}
    assert worker.cpu_render_threads({"LP_NUM_THREADS": "3"}, parallel_jobs=2) == {}, "an explicit setting wins"
    monkeypatch.setattr(os.path, "exists", lambda path: path == "/proc/driver/nvidia")
    assert worker.cpu_render_threads({}, parallel_jobs=2) == {}, "GPU rendering: nothing to split"
