"""The worker's status file, <log-dir>/status.json: who it is, its policy server, its tasks by outcome and the ones
it runs now, rewritten (atomically) after every change. `evalwf status` reads it (evalwf/report/run_state.py), and
so can a person or a script; the queue registration is told busy or idle at each write."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from evalwf.common.atomic import atomic_write_text
from evalwf.contract import WORKER_REFUSING_KEY

if TYPE_CHECKING:
    from evalwf.worker.shared_server import ServerState

# What became of the tasks a worker claimed (status.json's "tasks"; the worker's last log line).
TASK_OUTCOMES = (
    "succeeded",
    "adopted",  # the result of a run whose report was lost (evalwf/worker/completion_record.py)
    "failed",
    "handed_back",  # uncharged, when the worker stops
    "refused",  # a payload no worker takes: failed with the reason
    "lost",  # cancelled, or its lease expired, while it ran
    "not_ours",  # a campaign whose workflow directory this worker does not allow: handed back uncharged
    "node_unfit",  # a benchmark whose node checks failed here (evalwf/worker/node_gate.py): handed back uncharged
)


class WorkerIdentity(TypedDict):
    """Who writes a status.json."""

    worker_id: str
    host: str
    pid: int
    started_at: float  # the process's start (epoch seconds): a later process given the same pid is not this worker
    gpu: str
    slots: int
    queue: str
    route: str


class WorkerStatus:
    """The tallies status.json shows (tasks by outcome, running tasks) and the file itself."""

    def __init__(
        self,
        path: Path,
        identity: WorkerIdentity,
        server_state: Callable[[], ServerState],
        refusing: Callable[[], dict[str, dict[str, str]]],
    ):
        self.path = path
        self.identity = identity  # worker_id, host, pid, started_at, gpu, slots, queue, route
        self.server_state = (
            server_state  # loading (since, timeout, log) / ready or dead (loads, alive) / external / none
        )
        self.refusing = refusing  # the benchmarks whose node checks failed here
        self.observer: Any = None  # the worker's queue registration (queue_client.WorkerRegistration), once made
        self.counts = dict.fromkeys(TASK_OUTCOMES, 0)
        self.running: dict[str, str] = {}  # task id -> its name
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()

    def count(self, outcome: str) -> None:
        with self._lock:
            self.counts[outcome] += 1

    def started(self, task_id: str, name: str) -> None:
        with self._lock:
            self.running[task_id] = name

    def ended(self, task_id: str) -> None:
        with self._lock:
            self.running.pop(task_id, None)

    def write(self, state: str = "running") -> None:
        with self._write_lock:  # snapshot and write under one lock: a later state is never overwritten by an earlier
            with self._lock:
                status = {
                    **self.identity,
                    "state": state,
                    **self.server_state(),
                    "tasks": dict(self.counts),
                    "running": dict(self.running),
                    WORKER_REFUSING_KEY: self.refusing(),
                    "updated_at": datetime.now(UTC).isoformat(),
                }
                current = next(iter(self.running), None)
            if self.observer is not None:
                self.observer.activity(current)  # busy with a task / idle, for the queue's worker observation
            atomic_write_text(self.path, json.dumps(status, indent=2) + "\n")
