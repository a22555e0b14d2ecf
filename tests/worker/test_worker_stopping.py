"""A stopping worker leaves no process behind and gives up on no slot that is still doing its own work.

Spares: a stopping worker waits for the spares it is still stopping and stops those its slots never got to. A spare
left behind outlives the worker and, when it exits, stays a zombie wherever PID 1 does not reap (a CI container did).
The spares here are real processes that, like a spare busy importing Snakemake on a loaded machine, take seconds to
exit after their lifeline closes.

Slots: the worker leaves a slot behind only while the slot's request has waited for the server longer than a healthy
server takes to answer (the server hangs). A slot still stopping its job step or handing its task back on a loaded
machine is waited for: left, its task was charged an attempt and came back only when its lease expired.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalwf.worker import job_steps
from evalwf.worker.gpu_worker import STOP_EXIT_S, STOP_HAND_BACK_S, GpuWorker
from evalwf.worker.job_steps import JobSteps
from evalwf.worker.server_waits import ServerWaits

EXIT_AFTER_EOF_S = 2.5  # longer than STOP_HAND_BACK_S: what made the worker give up on the slot


class SlowToExitSpare(job_steps.SpareStep):
    """A spare that reads its lifeline to EOF, then takes EXIT_AFTER_EOF_S to exit (SIGTERM and SIGINT ignored)."""

    def __init__(self, cwd: str, grace_s: float, preload_after_s: float = 0.0):
        script = (
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            f"sys.stdin.buffer.read(); time.sleep({EXIT_AFTER_EOF_S})\n"
        )
        self.process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, cwd=cwd)


def stopping_worker(steps: JobSteps, waits: ServerWaits) -> SimpleNamespace:
    """What GpuWorker._leave_blocked_slots reads of a worker told to stop well over STOP_EXIT_S ago."""
    return SimpleNamespace(stop_requested_at=time.monotonic() - 10 * STOP_EXIT_S, steps=steps, waits=waits)


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[JobSteps]:
    monkeypatch.setattr(job_steps, "SpareStep", SlowToExitSpare)
    steps = JobSteps(threading.Event(), warm=True, forked=False)  # spares as fresh interpreters
    yield steps
    for spare in list(steps.spares.values()):
        spare.process.kill()
        spare.process.wait()


def test_a_spare_being_stopped_keeps_the_worker_waiting(steps: JobSteps, tmp_path: Path) -> None:
    steps.prepare_spare(0, str(tmp_path))
    spare = steps.spares[0].process
    discarding = threading.Thread(target=steps.discard_spare, args=(0,))
    discarding.start()
    time.sleep(0.3)
    worker = stopping_worker(steps, ServerWaits())
    left = GpuWorker._leave_blocked_slots(worker, time.monotonic() - 10 * STOP_HAND_BACK_S, [])
    assert not left, "the slot is stopping its spare, not waiting for the Labtasker server: the worker must not leave"
    assert steps.stopping(), "a spare that has not exited yet is a process the worker must wait for"
    discarding.join(10)
    assert spare.poll() is not None and not steps.stopping()


def test_the_worker_stops_the_spares_its_slots_left_and_waits_for_those_being_stopped(
    steps: JobSteps, tmp_path: Path
) -> None:
    steps.prepare_spare(0, str(tmp_path))
    steps.prepare_spare(1, str(tmp_path))
    left, being_stopped = steps.spares[0].process, steps.spares[1].process
    threading.Thread(target=steps.discard_spare, args=(1,)).start()  # slot 1 is stopping its own
    time.sleep(0.2)
    started = time.monotonic()
    steps.discard_all()  # slot 0 is blocked (say, in a request to a hung server): its spare is still waiting
    assert left.poll() is not None and being_stopped.poll() is not None, "both spares exited and were reaped"
    assert time.monotonic() - started >= EXIT_AFTER_EOF_S - 0.5, "it waited for them rather than leaving them"
    assert steps.spares == {} and not steps.stopping()


class SlowServer:
    """A client whose calls take `reply_s` to return (a loaded machine's server, or a hung one)."""

    def __init__(self, reply_s: float):
        self.reply_s = reply_s

    def _unclaim(self, **_: object) -> None:
        time.sleep(self.reply_s)


def test_a_slot_is_left_only_once_its_request_has_waited_for_the_server_too_long() -> None:
    waits = ServerWaits()
    worker = stopping_worker(JobSteps(threading.Event(), warm=False), waits)
    policy_stopped_at = time.monotonic() - 10 * STOP_HAND_BACK_S
    busy = threading.Event()
    local_work = threading.Thread(target=busy.wait, args=(10,))  # joining its heartbeat, say: no request
    local_work.start()
    try:
        assert not GpuWorker._leave_blocked_slots(worker, policy_stopped_at, [local_work]), (
            "a slot busy with its own work is waited for, however long ago its job step ended"
        )
    finally:
        busy.set()
        local_work.join()

    client = waits.track(SlowServer(reply_s=STOP_HAND_BACK_S + 1.0))
    handing_back = threading.Thread(target=client._unclaim, kwargs={"task_id": "t", "run_id": "r"})
    handing_back.start()
    time.sleep(0.3)
    assert 0 < waits.waiting_for(handing_back) < STOP_HAND_BACK_S
    assert not GpuWorker._leave_blocked_slots(worker, policy_stopped_at, [handing_back]), (
        "a request the server has not answered yet within STOP_HAND_BACK_S is waited for"
    )
    time.sleep(STOP_HAND_BACK_S)
    assert GpuWorker._leave_blocked_slots(worker, policy_stopped_at, [handing_back]), (
        "a request waiting longer than a healthy server answers: the server hangs, the slot is left"
    )
    handing_back.join()
    assert waits.waiting_for(handing_back) == 0.0


def test_slots_that_have_all_ended_are_not_left_behind() -> None:
    """The last slot ended after STOP_EXIT_S (a loaded machine): no slot waits for the server, so the worker does
    not stop "without them" and withdraws its queue registration (a stopped worker was still counted as waiting)."""
    worker = stopping_worker(JobSteps(threading.Event(), warm=False), ServerWaits())
    assert not GpuWorker._leave_blocked_slots(worker, time.monotonic() - 10 * STOP_HAND_BACK_S, [])


class RecordingSpare(job_steps.SpareStep):
    """A spare that records when it was told to import; handed a step, it runs a trivial process as that step."""

    told: list[float] = []

    def __init__(self, cwd: str, grace_s: float, preload_after_s: float = 0.0):
        RecordingSpare.told.append(preload_after_s)
        self.process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.buffer.read()"],
                                        stdin=subprocess.PIPE, cwd=cwd)  # fmt: skip

    def start(self, args, env, cwd, log_path):  # type: ignore[no-untyped-def]
        assert self.process.stdin is not None
        self.process.stdin.close()  # the "step" ends at once
        return self.process


def test_after_a_warm_start_the_next_spare_imports_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A step started from a spare has nothing left to import: the next spare starts importing at once, so it is
    ready when a short batch ends (it waited COLD_STEP_STARTUP_S and was not: a cold start per 0.02 s batch). After
    a cold start it still waits for that step's own imports."""
    from evalwf.worker.job_payload import JobStep

    monkeypatch.setattr(job_steps, "SpareStep", RecordingSpare)
    RecordingSpare.told = []
    steps = JobSteps(threading.Event(), warm=True, forked=False)  # spares as fresh interpreters
    argv = [sys.executable, "-m", "snakemake", "--version"]
    step = JobStep(workdir=str(tmp_path), argv=argv, outputs=[], logs=[], policy=None, campaign="c")
    try:
        steps.prepare_spare(0, str(tmp_path))
        steps._launch(0, step, {}, tmp_path / "warm.log").wait()
        assert RecordingSpare.told == [0.0, 0.0], "warm start: the next spare imports at once"
        cold = JobStep(workdir=str(tmp_path), argv=[sys.executable, "-c", "pass"], outputs=[], logs=[], policy=None,
                       campaign="c")  # fmt: skip
        steps._launch(0, cold, {}, tmp_path / "cold.log").wait()
        assert RecordingSpare.told[-1] == job_steps.COLD_STEP_STARTUP_S, "cold start: after the step's own imports"
    finally:
        steps.discard_all()
