"""What a worker tells the queue about a claimed task: heartbeats while it runs, that its job step starts, and how
it ended (complete / fail / unclaim), each retried through transient server trouble (an embedded server is found
or restarted meanwhile) for minutes while the worker runs, for seconds once it is told to stop: a task whose report
never gets through comes back when its lease expires."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from evalwf.contract import JOB_STEP_PROGRESS
from evalwf.worker import queue_client
from evalwf.worker.log import log

REPORT_DEADLINE_S = 120.0  # retrying a report through server trouble while running normally
STOP_REPORT_GRACE_S = 2.0  # ... and once told to stop: stopping stays prompt, the lease recovers the rest


class QueueReports:
    def __init__(
        self,
        client: Callable[[], Any],
        recover_server: Callable[[], bool],
        stop_requested_at: Callable[[], float | None],
    ):
        self.client = client  # a new client of the queue's current endpoint
        self.recover_server = recover_server  # the queue did not answer: find or restart an embedded server
        self.stop_requested_at = stop_requested_at  # when a signal told the worker to stop (None: it was not)

    def report(self, client: Any, claim: Any, action: str, **kwargs: Any) -> bool:
        """complete / fail / unclaim, retried through transient server trouble."""
        from labtasker import APIError, LabtaskerError

        for _ in self._attempts():
            try:
                if action == "complete":
                    queue_client.complete(client, claim, kwargs["result"])
                elif action == "fail":
                    queue_client.fail(client, claim, kwargs["error_type"], kwargs["message"])
                else:
                    queue_client.unclaim(client, claim)
                return True
            except APIError as error:
                if error.code in ("stale_run", "run_finalized"):
                    log(f"task {claim.task.id}: {action} not accepted ({error.code}); the task moved on")
                    return False
                if error.status_code < 500 and error.code != "database_busy":
                    log(f"task {claim.task.id}: {action} rejected: {error.code}: {error.message}")
                    return False
            except LabtaskerError as error:
                log(f"task {claim.task.id}: {action} transport error: {error}")
                self.recover_server()  # the embedded server keeps its socket: this client reconnects as it is
        log(f"task {claim.task.id}: giving up reporting {action}; the lease expiry will recover it")
        return False

    def _attempts(self) -> Iterator[None]:
        """One step per try of a report: after each failed try a pause (0.25 s, doubling up to 5 s), until the
        deadline (_deadline) leaves no time for another."""
        started = time.monotonic()
        delay = 0.25
        while True:
            yield
            remaining = self._deadline(started) - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 5.0)

    def _deadline(self, started: float) -> float:
        """Reports are retried for minutes through server trouble, but for seconds once the worker is stopping."""
        deadline = started + REPORT_DEADLINE_S
        stop_requested_at = self.stop_requested_at()
        if stop_requested_at is not None:
            deadline = min(deadline, stop_requested_at + STOP_REPORT_GRACE_S)
        return deadline

    def step_starts(self, client: Any, claim: Any, worker_id: str, log_path: Path) -> bool:
        """Tell the queue the job step starts now (a submitter's Ctrl-C cancels claimed tasks whose step has not
        started: such a step would only wait for the submitter's removed files and fail), after checking that the
        task was not cancelled meanwhile (e.g. while the policy server was loading). False: it was. A busy server
        (database_busy: its SQLite write lock was not free in time, as when hundreds of workers claim at once) is
        asked again, as reports are: a start it never recorded would have a Ctrl-C cancel a running step."""
        from labtasker import APIError, LabtaskerError

        for _ in self._attempts():
            try:
                queue_client.heartbeat(client, claim)
                queue_client.report_progress(
                    client, claim, {JOB_STEP_PROGRESS: "started", "worker": worker_id, "log": str(log_path)}
                )
                return True
            except APIError as error:
                if error.code in ("stale_run", "run_finalized"):
                    log(f"task {claim.task.id} was cancelled before its job step started ({error.code})")
                    return False
                if error.status_code < 500 and error.code != "database_busy":
                    log(f"task {claim.task.id}: the job step start was refused: {error.code}: {error.message}")
                    return True
            except LabtaskerError as error:
                log(f"task {claim.task.id}: could not report the job step start: {error}")
                return True
        log(f"task {claim.task.id}: the queue stayed busy; the job step starts unreported")
        return True

    def heartbeats(self, claim: Any, revoked: threading.Event, interval_s: float) -> None:
        """Until `revoked` is set (the task ended): a heartbeat every interval_s, on a client of its own; a task
        the queue no longer holds for this run (cancelled, lease expired) sets `revoked`, which stops its step."""
        from labtasker import APIError, LabtaskerError

        client = self.client()
        try:
            while not revoked.wait(interval_s):
                try:
                    queue_client.heartbeat(client, claim)
                except APIError as error:
                    if error.code in ("stale_run", "run_finalized"):
                        log(f"task {claim.task.id}: heartbeat rejected ({error.code}: {error.details}); stopping it")
                        revoked.set()
                        return
                    log(f"task {claim.task.id}: heartbeat error {error.code}: {error.message}")
                except LabtaskerError as error:
                    log(f"task {claim.task.id}: heartbeat transport error: {error}")
                    self.recover_server()
        finally:
            client.close()
