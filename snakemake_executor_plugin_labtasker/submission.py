"""Submit one job as one Labtasker task, or find and reuse the task a previous submission created.

Outcomes for the deterministic task id (see task_identity.py):
- no task yet                      -> created
- pending                          -> args refreshed (this Snakemake's job step command), attached
- running                          -> attached (the running job step writes the same outputs)
- succeeded with its outputs present, and either this job's incomplete marker names the task or the task
  finished after this submitter started
                                   -> adopted (a killed submitter, or a second one that planned the job while
                                      a worker was finishing it: never evaluated twice)
- succeeded otherwise              -> deleted and created again (Snakemake wants the job rerun: forced, or
                                      its output is gone)
Snakemake schedules a job whose outputs exist only when it decided to run it again (forced, or a rerun trigger):
those outputs are removed here, before the task is queued, as Snakemake's own local executor does. A worker adopts
a task whose outputs exist and validate instead of evaluating it (evalwf/worker/task_run.py), so forcing is this
submitter's decision, never something a queued task can ask for.
- failed or cancelled              -> args refreshed and requeued (a Snakemake retry never duplicates); a task
                                      whose lease expired while its outputs were written (its completion report
                                      was lost in an outage) is requeued naming that run, for adoption: the
                                      worker that claims it checks the run's outputs and completes it without
                                      evaluating it again (evalwf/worker/completion_record.py)

Snakemake hands the executor the jobs that became ready together (run_jobs); SubmitPool submits them from a few
threads (one HTTP round trip each, latency-bound on the server's writes: 1400 tasks take seconds, not minutes),
while everything Snakemake sees (report_job_submission, errors, logs) stays on Snakemake's thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, TypeVar

from evalwf.contract import ADOPT_RUN_METADATA
from evalwf.contract.task_payload import TaskArgs
from snakemake_executor_plugin_labtasker.task_identity import TaskMetadata, TaskSpec

# Clocks of the submitter and a remote server may differ by this much; a task finishing this close to the
# submitter's start is taken as finished during this run.
CLOCK_SLACK = timedelta(seconds=2)


@dataclass(frozen=True)
class Submission:
    task_id: str
    action: str  # created | attached | adopted | refreshed | requeued | recreated
    status: str


def _finished_since(task: Any, since: datetime | None) -> bool:
    finished = getattr(task, "finished_at", None)
    if since is None or finished is None:
        return False
    if finished.tzinfo is None:
        finished = finished.replace(tzinfo=UTC)
    return finished >= since - CLOCK_SLACK


def _adoptable(task: Any, spec: TaskSpec, resuming: bool, started_at: datetime | None) -> bool:
    """A succeeded task whose outputs exist was planned by this Snakemake while it was finishing (or before a
    kill of the previous submitter): its result stands, running it again would evaluate the batch twice."""
    return task.status == "succeeded" and spec.outputs_exist() and (resuming or _finished_since(task, started_at))


def lost_report_run(task: Any, outputs: list[str]) -> str | None:
    """The run of a failed task whose lease expired after it had written every output: its report was lost (a
    server outage), so the batch may be done. None for any other failure, or while an output is missing."""
    error = getattr(task, "last_error", None)
    if task.status != "failed" or getattr(error, "type", None) != "HeartbeatTimeout" or not outputs:
        return None
    return error.run_id if all(os.path.exists(path) for path in outputs) else None


def requeue_for_adoption(client: Any, task: Any, run_id: str) -> Any:
    """Back to the queue naming the run whose report was lost: its worker's successor adopts that run's result
    when the outputs are unchanged and valid, else evaluates the batch as any retry would."""
    client.update_task(task.id, {"metadata": {**(task.metadata or {}), ADOPT_RUN_METADATA: run_id}})
    return client.requeue_task(task.id)


def _existing_task(client: Any, task_id: str) -> Any | None:
    from labtasker import APIError

    try:
        return client.get_task(task_id)
    except APIError as error:
        if error.status_code == 404:
            return None
        raise


def clear_outputs_for_rerun(client: Any, spec: TaskSpec, resuming: bool, started_at: datetime | None) -> list[str]:
    """Remove the outputs of a job Snakemake runs again (they exist although it scheduled the job), unless they are
    a task's result that stands: one running now, one adopted (finished during this run) or one whose completion
    report was lost. Returns the removed paths."""
    present = [path for path in spec.outputs if os.path.lexists(path)]
    if not present:
        return []
    task = _existing_task(client, spec.task_id)
    if task is not None and (
        task.status == "running" or _adoptable(task, spec, resuming, started_at) or lost_report_run(task, spec.outputs)
    ):
        return []
    removed = [path for path in present if os.path.islink(path) or not os.path.isdir(path)]  # this workflow's
    for path in removed:  # outputs are files; a directory is left to Snakemake
        os.unlink(path)
    return removed


def _same_routes(task: Any, routes: list[str]) -> bool:
    return sorted(getattr(task, "routes", None) or []) == sorted(routes)


class TaskChanges(TypedDict):
    """A task's fields a submission sets (created, or refreshed in place)."""

    args: TaskArgs
    metadata: TaskMetadata
    name: str
    priority: int
    max_attempts: int
    routes: list[str]


def _changes(spec: TaskSpec, *, priority: int, max_attempts: int, routes: list[str]) -> TaskChanges:
    return {
        "args": spec.args,
        "metadata": spec.metadata,
        "name": spec.name,
        "priority": priority,
        "max_attempts": max_attempts,
        "routes": sorted(routes),
    }


def submit_job_task(
    client: Any,
    spec: TaskSpec,
    *,
    priority: int,
    max_attempts: int,
    routes: list[str],
    resuming: bool,
    started_at: datetime | None = None,
) -> Submission:
    """`resuming`: this job's incomplete marker (Snakemake persistence) names spec.task_id; `started_at`: when
    this submitter started (a task that succeeded since then finished while this run planned it)."""
    from labtasker import APIError

    clear_outputs_for_rerun(client, spec, resuming, started_at)

    def create() -> Any:
        return client.submit_task(
            spec.args,
            name=spec.name,
            metadata=spec.metadata,
            priority=priority,
            max_attempts=max_attempts,
            routes=routes,
            task_id=spec.task_id,
        )

    try:
        task = create()
    except APIError as error:
        if error.code != "task_id_conflict":
            raise
        task = client.get_task(spec.task_id)
    else:
        # (the server answers an identical re-submission with the existing task, whatever its routes: one parked
        # by an interrupted Ctrl-C (cancellation.PARKED_ROUTE) gets its route back through the refresh below)
        if task.status == "pending" and task.attempt == 0 and task.args == spec.args and _same_routes(task, routes):
            return Submission(spec.task_id, "created", task.status)

    status = task.status
    if status == "running":
        return Submission(spec.task_id, "attached", status)
    if status == "succeeded":
        if _adoptable(task, spec, resuming, started_at):
            return Submission(spec.task_id, "adopted", status)
        client.delete_task(spec.task_id)
        task = create()
        return Submission(spec.task_id, "recreated", task.status)
    changes = _changes(spec, priority=priority, max_attempts=max_attempts, routes=routes)
    lost = lost_report_run(task, spec.outputs)
    if lost is not None:  # a killed submitter's batch whose report was lost: its result may stand
        changes["metadata"] = {**spec.metadata, ADOPT_RUN_METADATA: lost}
    try:
        client.update_task(spec.task_id, changes)
    except APIError as error:
        # claimed (or finished) between our read and the update: attach to whatever it is now
        current = client.get_task(spec.task_id)
        if current.status in ("running", "pending"):
            return Submission(spec.task_id, "attached", current.status)
        if current.status == "succeeded" and spec.outputs_exist():
            return Submission(spec.task_id, "adopted", current.status)
        raise error
    if status == "pending":
        return Submission(spec.task_id, "refreshed", status)
    task = client.requeue_task(spec.task_id)
    return Submission(spec.task_id, "requeued", task.status)


SUBMIT_THREADS = 16  # concurrent submissions; the embedded server answers ~20 serial, ~250 concurrent per second
SUBMIT_TRIES = 3

T = TypeVar("T")


class SubmissionStopped(Exception):
    """The submitter is cancelling (Ctrl-C): this submission was not started."""


def submit_with_retries(
    submit: Callable[[], Submission],
    *,
    recover: Callable[[], None],
    stopped: Callable[[], bool],
    tries: int = SUBMIT_TRIES,
    sleep: Callable[[float], None] = time.sleep,
) -> Submission:
    """submit() until it answers, recovering the server between tries; never starts once `stopped()`."""
    from labtasker import LabtaskerError

    last_error: Exception | None = None
    for attempt in range(tries):
        if stopped():
            raise SubmissionStopped()
        try:
            return submit()
        except LabtaskerError as error:
            last_error = error
            recover()
            sleep(1.0 + attempt)
    assert last_error is not None
    raise last_error


class SubmitPool:
    """Runs one call per item on a few threads and hands back (item, result, error) in completion order, on the
    calling thread. stop() lets the calls in flight finish and starts no new one: afterwards every task this
    pool created is known to its caller, so a Ctrl-C can cancel exactly those."""

    def __init__(self, threads: int = SUBMIT_THREADS):
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.stopped = False

    def run(self, call: Callable[[T], Any], items: Sequence[T]) -> Iterator[tuple[T, Any, BaseException | None]]:
        if not items:
            return
        if len(items) == 1 or self.threads <= 1:  # nothing to overlap: no thread hop
            for item in items:
                try:
                    yield item, self._guarded(call, item), None
                except Exception as error:  # handed back to the caller, which reports it per job
                    yield item, None, error
            return
        with self._lock:
            if self.stopped:
                for item in items:
                    yield item, None, SubmissionStopped()
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="labtasker-submit")
            futures: dict[Future[Any], T] = {self._pool.submit(self._guarded, call, item): item for item in items}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], None if error else future.result(), error

    def _guarded(self, call: Callable[[T], Any], item: T) -> Any:
        if self.stopped:
            raise SubmissionStopped()
        return call(item)

    def stop(self) -> None:
        """No new submission starts; wait for the ones in flight (each is a few HTTP calls)."""
        with self._lock:
            self.stopped = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)  # the queued ones end at once in _guarded (as_completed sees them)
