"""The worker's side of Labtasker's run protocol: claim, heartbeat, progress, complete, fail, unclaim; and its
registration with the queue (a worker observation).

Labtasker 2.8 exposes these only as private client methods (`Client._claim`, ...), which a Labtasker upgrade may
change without notice: they are called here and nowhere else, and tests/worker/test_queue_client_contract.py
checks their signatures against the pinned version, so a change fails loudly instead of breaking workers.
"""

from __future__ import annotations

import threading
from typing import Any, TypedDict

MAX_MESSAGE_CHARS = 8000


class _Adoption(TypedDict, total=False):
    duration_s: float  # how long its job step ran
    policy_server_loads: int  # policy servers this worker started so far
    worker_log: str  # host:path of the job step's log
    adopted: str  # why outputs that exist were taken as the result (no job step ran)
    adopted_run: str  # the run whose lost report this completes
    adopted_by: str  # the worker that adopted it


class TaskResult(_Adoption):
    """What a worker reports with a completed task (the task's `result`; `evalwf task` and the submitter read it)."""

    worker: str
    gpu: str


class JobStepProgress(TypedDict):
    """The progress a worker reports when a job step starts (a submitter's Ctrl-C cancels claimed tasks without)."""

    job_step: str  # contract.JOB_STEP_PROGRESS: "started"
    worker: str
    log: str


class _Refusals(TypedDict, total=False):
    refusing: dict[str, dict[str, str]]  # contract.WORKER_REFUSING_KEY: {campaign: {benchmark: reason and fix}}


class WorkerObservation(_Refusals):
    """A worker's registration metadata (its Labtasker worker observation)."""

    worker: str
    host: str
    pid: int
    gpu: str
    slots: int


def claim(client: Any, *, route: str, run_id: str) -> Any:
    """A claimed task (with .task and .run_id), or None when nothing is queued for `route`."""
    return client._claim(route=route, run_id=run_id)


def heartbeat(client: Any, claim: Any) -> Any:
    return client._heartbeat(task_id=claim.task.id, run_id=claim.run_id)


def report_progress(client: Any, claim: Any, progress: JobStepProgress) -> None:
    client._report_progress(task_id=claim.task.id, run_id=claim.run_id, progress=progress)


def complete(client: Any, claim: Any, result: TaskResult) -> None:
    client._complete(task_id=claim.task.id, run_id=claim.run_id, result=result)


def fail(client: Any, claim: Any, error_type: str, message: str) -> None:
    client._fail(
        task_id=claim.task.id,
        run_id=claim.run_id,
        error_type=error_type,
        message=message[-MAX_MESSAGE_CHARS:],
        traceback=None,
    )


def unclaim(client: Any, claim: Any) -> None:
    """Back to pending, attempt not charged (a stopping worker hands its task back)."""
    client._unclaim(task_id=claim.task.id, run_id=claim.run_id)


def observe_worker(client: Any, *, route: str, metadata: WorkerObservation) -> Any:
    """Register this worker with the queue (a Labtasker worker observation: what `count_workers` /
    `list_workers` report, and what a submitter checks before warning that no worker is running). Returns
    Labtasker's own reporter, a context manager: entering registers (then re-reports every minute from a
    thread; an observation expires 5 minutes after the last report), `.activity(task_id or None)` marks it
    busy or idle, leaving withdraws it."""
    from labtasker.observations import ObservationReporter

    return ObservationReporter(client._configuration, route, metadata)


class WorkerRegistration:
    """This worker's registration (observe_worker) whose metadata can change while it runs (what the worker
    refuses, for the submitter to show): Labtasker's reporter fixes its metadata when it is made, so a change
    registers a new observation and then withdraws the old one (never a moment with none)."""

    def __init__(self, client: Any, *, route: str, metadata: WorkerObservation):
        self._client, self._route, self.metadata = client, route, metadata.copy()
        self._reporter = observe_worker(client, route=route, metadata=self.metadata)
        self._entered = False
        self._task_id: str | None = None
        self._lock = threading.Lock()  # slots update it, the status writer reports activity

    @property
    def id(self) -> str:
        return self._reporter.id

    def __enter__(self) -> WorkerRegistration:
        with self._lock:
            self._reporter.__enter__()
            self._entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._entered = False
            self._reporter.__exit__(None, None, None)

    def activity(self, task_id: str | None) -> None:
        with self._lock:
            self._task_id = task_id
            self._reporter.activity(task_id)

    def update(self, refusing: dict[str, dict[str, str]]) -> None:
        """Report what this worker refuses (merged into what was registered) from now on."""
        with self._lock:
            merged: WorkerObservation = {**self.metadata, "refusing": refusing}
            if merged == self.metadata:
                return
            self.metadata = merged
            old, self._reporter = self._reporter, observe_worker(self._client, route=self._route, metadata=merged)
            if self._entered:
                self._reporter.__enter__()
                self._reporter.activity(self._task_id)
                old.__exit__(None, None, None)


def claim_preferring(client: Any, *, route: str, run_id: str, loaded: str | None) -> Any:
    """Claim a task of the `loaded` policy identity first (its affinity route), else any task of `route` (issue
    15). The same run_id serves both: a claim that returns nothing records nothing on the server, and a retry after
    a transport error asks the affinity route again, which returns a claim that went through there."""
    from evalwf.contract.affinity import affinity_enabled, affinity_route

    if loaded and affinity_enabled():
        claimed = claim(client, route=affinity_route(route, loaded), run_id=run_id)
        if claimed is not None:
            return claimed
    return claim(client, route=route, run_id=run_id)
