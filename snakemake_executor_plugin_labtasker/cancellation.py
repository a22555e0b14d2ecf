"""Ctrl-C: cancel the campaign's queued tasks, the claimed ones whose job step has not started, and (if asked)
the running ones: fast (bulk park, then concurrent cancels) and safe to interrupt (parked tasks are never
claimed)."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from evalwf.contract import JOB_STEP_PROGRESS
from snakemake_executor_plugin_labtasker.status_query import MAX_IDS_PER_FILTER, _list_all

if TYPE_CHECKING:
    from labtasker.models import Task


def job_step_started(task: Any) -> bool:
    """Whether the worker holding `task` has started its job step in the current attempt. A claimed task whose
    step has not started (its worker may be loading a policy for minutes) cannot finish once the submitter is
    gone: the step would wait for the submitter's temporary files and fail."""
    progress = getattr(task, "progress", None) or {}
    return progress.get(JOB_STEP_PROGRESS) == "started" and getattr(task, "progress_attempt", None) == task.attempt


# Snakemake's closing line after any interrupted run: after the Ctrl-C summary it would bury it, saying only that
# jobs did not complete, which the summary already tells precisely (the exit status stays non-zero).
SNAKEMAKE_CLOSING_ERROR = "At least one job did not complete successfully."


class AfterCtrlC(logging.Filter):
    """Drops Snakemake's closing error once the Ctrl-C summary is printed: the summary is the last word."""

    def filter(self, record: logging.LogRecord) -> bool:
        return SNAKEMAKE_CLOSING_ERROR not in record.getMessage()


def summary_is_the_last_word() -> None:
    """Install AfterCtrlC on the logger Snakemake prints its closing error with (snakemake.logging)."""
    target = logging.getLogger("snakemake.logging")
    if not any(isinstance(existing, AfterCtrlC) for existing in target.filters):
        target.addFilter(AfterCtrlC())


# How to resume, the last words of every cancellation summary (invariant 4: only what is missing runs again).
RESUME = "To resume, rerun the same snakemake command: only what is missing runs."
PARKED_ROUTE = "parked-by-ctrl-c"  # no worker serves it; a resubmission restores the task's own route
CANCEL_THREADS = 16
RUNNING = 'status == "running"'


def _id_chunks(task_ids: list[str]) -> list[str]:
    return [
        "id in [" + ", ".join(json.dumps(t) for t in task_ids[start : start + MAX_IDS_PER_FILTER]) + "]"
        for start in range(0, len(task_ids), MAX_IDS_PER_FILTER)
    ]


def park_pending(client: Any, task_ids: list[str], log: Callable[[str], None]) -> int:
    """Move the pending tasks among task_ids to a route no worker claims, in one bulk call per 400 ids: from
    here on none of them can start, even if the cancellation that follows is cut short (a second Ctrl-C, a
    kill). Labtasker's bulk update never touches running tasks."""
    from labtasker import LabtaskerError

    parked = 0
    for ids in _id_chunks(task_ids):
        try:
            parked += client.update_tasks(
                filter=f'status == "pending" and {ids}', changes={"routes": [PARKED_ROUTE]}
            ).updated
        except LabtaskerError as error:
            log(f"[labtasker] could not park queued tasks before cancelling them: {error}")
    return parked


def _running(client: Any, task_ids: list[str]) -> dict[str, Task]:
    """The running tasks among task_ids (a few: one per worker), with their progress."""
    found: dict[str, Task] = {}
    for ids in _id_chunks(task_ids):
        found.update({task.id: task for task in _list_all(client, f"{RUNNING} and {ids}")})
    return found


def cancel_tasks(
    client: Any,
    task_ids: list[str],
    campaign: str,
    *,
    include_running: bool,
    log: Callable[[str], None],
    threads: int = CANCEL_THREADS,
    summary: bool = True,
    why: str = "Ctrl-C",
    announce: Callable[[str], None] | None = None,
) -> list[str]:
    """Cancel the pending tasks among task_ids, the running ones whose job step has not started, and with
    `include_running` every running one; return the cancelled ids.

    The pending ones are parked first (park_pending), then every task is cancelled with one call each from
    `threads` threads (Labtasker 2.8 has no bulk cancel). Running job steps are left alone by default: they
    finish and write their outputs, and a rerun of the same Snakemake command adopts them instead of redoing
    the work. The summary line (one line: what was cancelled, what keeps running, how to resume) names `why`
    (Ctrl-C, SIGHUP, SIGTERM) and goes to `announce` (default: `log`).
    """
    from labtasker import APIError, LabtaskerError

    del campaign  # the ids select exactly this run's tasks
    task_ids = list(dict.fromkeys(task_ids))
    if not task_ids:  # (nothing to say: Snakemake also cancels after an error of its own, before any submission)
        return []
    park_pending(client, task_ids, log)
    try:
        running = _running(client, task_ids)
    except LabtaskerError as error:
        log(f"[labtasker] could not query running tasks before cancelling ({error}); cancelling all active ones")
        running = {}

    def wanted(task_id: str) -> bool:
        task = running.get(task_id)
        return task is None or include_running or not job_step_started(task)

    def cancel(task_id: str) -> bool:
        try:
            client.cancel_task(task_id)
            return True
        except APIError as error:  # finished meanwhile, or never created: nothing to cancel
            if error.code not in ("task_state_conflict", "task_not_found"):
                log(f"[labtasker] could not cancel task {task_id}: {error.code}: {error.message}")
        except LabtaskerError as error:
            log(f"[labtasker] could not cancel task {task_id}: {error}")
        return False

    candidates = [task_id for task_id in task_ids if wanted(task_id)]
    with ThreadPoolExecutor(max(1, min(threads, len(candidates))), thread_name_prefix="labtasker-cancel") as pool:
        outcomes = list(pool.map(cancel, candidates))
    cancelled = [task_id for task_id, ok in zip(candidates, outcomes, strict=True) if ok]
    claimed = [t for t in cancelled if t in running]
    left = [t for t in running if t not in cancelled]
    parts = []
    if cancelled:
        parts.append(
            f"cancelled {len(cancelled) - len(claimed)} queued task(s)"
            + (f" and {len(claimed)} claimed task(s) whose job step had not started" if claimed else "")
        )
    if left:
        parts.append(
            f"{len(left)} running job step(s) left to finish on their workers: their results are kept, and "
            "rerunning the same command adopts them"
        )
    elif cancelled:
        parts.append("no job step keeps running")
    if parts and summary:  # (a caller with its own message about these tasks says it there)
        (announce or log)(f"[labtasker] {why}: " + "; ".join(parts) + f". {RESUME}")
    return cancelled


class Cancelling:
    """The Executor's Ctrl-C side (a mixin of snakemake_executor_plugin_labtasker.Executor)."""

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        self._cancelling = True
        with self.lock:
            # no status round from here on: rounds would compete with the cancellation for the server (each
            # cancelled task is a changed task), and Snakemake's shutdown then joins a status thread that is
            # already done instead of waiting out its sleep (what RemoteExecutor.shutdown sets, set earlier)
            self.wait = False
        with self._sigint_deferred():
            pool = getattr(self, "_submit_pool", None)
            if pool is not None:
                pool.stop()  # submissions in flight finish (their ids are in self._status), no new one starts
            # Snakemake takes the jobs being checked out of active_jobs during a status round: also cancel every
            # task this run submitted and has not seen finish
            ids = list(dict.fromkeys([j.external_jobid for j in active_jobs if j.external_jobid] + list(self._status)))
            try:
                cancel_tasks(
                    self.client,
                    ids,
                    self.campaign,
                    include_running=self.settings.cancel_running,
                    log=self.logger.info,
                    why=self.interrupted_by,
                    announce=self._announce,
                )
            except Exception as error:
                self.logger.warning(f"[labtasker] cancelling tasks failed: {error}")
            summary_is_the_last_word()

    @contextlib.contextmanager
    def _sigint_deferred(self) -> Iterator[None]:
        """A second Ctrl-C (or a SIGHUP) while the tasks are being cancelled must not leave queued tasks behind for
        workers to claim later: a Ctrl-C is answered with a line, and the cancellation (seconds) goes on."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
        signal.signal(
            signal.SIGINT,
            lambda *_: self.logger.warning("[labtasker] still cancelling the queued tasks, a few seconds..."),
        )
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # no terminal left to answer on
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cancellation it asks for is under way
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
