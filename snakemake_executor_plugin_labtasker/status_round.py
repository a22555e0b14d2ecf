"""The status round: one query for every active job's task (status_query.StatusPoller), each job reported to
Snakemake as its task finishes, and what a round also does: stop a policy whose circuit breaker the workers opened,
requeue a task whose report was lost for adoption, show workers' refusals and the progress line, and warn when
nothing is claimed and no worker is registered."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from evalwf.queue.tls import tls_problem
from snakemake_executor_plugin_labtasker.errors import WorkflowError
from snakemake_executor_plugin_labtasker.policy_breaker import no_retry, queued_of, stop_message, stop_queued_tasks
from snakemake_executor_plugin_labtasker.status_query import failure_message
from snakemake_executor_plugin_labtasker.submission import lost_report_run, requeue_for_adoption

if TYPE_CHECKING:
    from labtasker.models import Task


def check_results_writable(paths: list[str]) -> None:
    """Snakemake touches a finished job's outputs and creates its missing logs (and removes a failed job's
    outputs); where the results directory turned read-only, or lost its write permission, while the campaign ran,
    it would stop with a long traceback naming no file. Checked first (without writing), to stop with the file and
    the fix instead. Nothing is lost: finished batches are adopted by the next run."""
    for path in paths:
        # a missing log is created with its missing directories (a job step that could not write its own left
        # none): what must be writable then is the nearest directory that exists
        target = path
        while not os.path.lexists(target) and os.path.dirname(target) not in ("", target):
            target = os.path.dirname(target)
        if not os.access(target, os.W_OK):
            raise WorkflowError(
                f"labtasker executor: cannot write {target}: the results directory is no longer writable (a "
                "read-only filesystem, or its permissions changed while the campaign ran). Make it writable and rerun "
                "the same command: finished batches are kept and adopted, running ones re-attached."
            )


def registered_workers(client: Any, route: str) -> int:
    """Workers registered (Labtasker worker observations, which expire 5 minutes after the last report) on the
    client's queue for `route`."""
    return int(client.count_workers(filter=f"route == {json.dumps(route)}"))


class StatusRound:
    """The Executor's status side (a mixin of snakemake_executor_plugin_labtasker.Executor, whose attributes it
    uses: client, poller, stops, progress, refusals, settings)."""

    async def check_active_jobs(self, active_jobs: list[SubmittedJobInfo]) -> AsyncGenerator[SubmittedJobInfo, None]:
        if not active_jobs:
            return
        if self._cancelling:  # after Ctrl-C: no error block per cancelled task to bury the cancellation summary
            for job_info in active_jobs:
                yield job_info
            return
        ids = [job_info.external_jobid for job_info in active_jobs]
        try:
            async with self.status_rate_limiter:
                tasks = self.poller.poll(self.client, ids)
            self._query_errors = 0
        except Exception as error:  # never let a queue hiccup abort the workflow: report and keep waiting
            self._query_errors += 1
            self._recover_server()
            if self._query_errors in (1, 10) or self._query_errors % 60 == 0:
                # it connected at start: a certificate it now refuses is named as changed, not as a server away
                problem = tls_problem(error, str(self.endpoint), connected_before=True)
                self.logger.warning(
                    f"[labtasker] status query failed ({self._query_errors} round(s) in a row), still waiting for "
                    f"{len(active_jobs)} job(s): {problem or f'{type(error).__name__}: {error}'}"
                )
            for job_info in active_jobs:
                yield job_info
            return
        self._stop_broken_policies(active_jobs, tasks)
        for job_info in active_jobs:
            task_id = job_info.external_jobid
            task = tasks.get(task_id)
            if task is None:
                misses = self._missing_rounds.get(task_id, 0) + 1
                self._missing_rounds[task_id] = misses
                if misses >= 3:
                    self.report_job_error(
                        job_info,
                        msg=f"Labtasker task {task_id} vanished from queue {self.queue} (deleted?).\n",
                    )
                else:
                    yield job_info
                continue
            self._missing_rounds.pop(task_id, None)
            if self._requeued_for_adoption(task, job_info):
                yield job_info
                continue
            logs = list(job_info.aux.get("logs", []))
            if task.status in ("succeeded", "failed", "cancelled"):  # what Snakemake then writes must be writable
                check_results_writable([*job_info.aux.get("outputs", []), *logs])
            previous = self._status.get(task_id)
            self._status[task_id] = task.status
            if task.status in ("succeeded", "failed", "cancelled"):
                self._status.pop(task_id, None)
            if task.status in ("succeeded", "failed", "cancelled"):
                self.progress.finished(
                    task_id,
                    job_info.aux.get("episodes", 0),
                    ok=task.status == "succeeded",
                    evaluated_before=self.progress.finished_before_run(task.finished_at),
                )
            if self.stops.quiet(job_info.aux.get("policy_identity"), task):
                if task.status == "pending":  # cancelled by the stop just now: over, as far as this run goes
                    self._status.pop(task_id, None)
                    self.progress.finished(task_id, job_info.aux.get("episodes", 0), ok=False)
                self._fail_quietly(job_info)  # its policy's one message said why
            elif task.status == "succeeded":
                self.report_job_success(job_info)
            elif task.status in ("failed", "cancelled"):
                if self.stops.is_stopped(job_info.aux.get("policy_identity")):
                    no_retry(job_info.job)  # its policy is stopped: a retry would only be failed unsubmitted
                self.report_job_error(
                    job_info,
                    msg=failure_message(task, self.queue, logs, inspect=self.task_command(task_id)),
                    aux_logs=[p for p in logs if os.path.exists(p)],
                )
            else:
                if task.status != previous and task.status == "running":
                    self.logger.info(f"[labtasker] task {task_id} running (attempt {task.attempt}/{task.max_attempts})")
                yield job_info
        running = sum(1 for task in tasks.values() if task.status == "running")
        queued = sum(1 for task in tasks.values() if task.status == "pending")
        for warning in self.refusals.poll(self.client):
            self.logger.warning(warning)
        line = self.progress.line(running, queued=queued, note=self.refusals.note())
        if line:
            self.logger.info(line)
        self._warn_without_workers(tasks)

    def _stop_broken_policies(self, active_jobs: list[SubmittedJobInfo], tasks: dict[str, Task]) -> None:
        """A policy whose circuit breaker the workers opened: one message, its queued tasks cancelled."""
        for identity, record in self.stops.newly_stopped().items():
            queued = queued_of(identity, active_jobs, tasks)
            cancelled = stop_queued_tasks(self.client, queued, record, log=self.logger.warning) if queued else []
            self.logger.error(stop_message(record, len(cancelled)))

    def _fail_quietly(self, job_info: SubmittedJobInfo) -> None:
        """Reported failed without an error block of its own (what report_job_error does after printing one) and
        with no retry left: the job's policy is stopped, its one message said why, and --retries must not
        resubmit it (Snakemake restarts a failed job while its restart_times exceed its attempt - 1)."""
        no_retry(job_info.job)
        self.workflow.scheduler.error_callback(job_info.job)

    def _requeued_for_adoption(self, task: Any, job_info: SubmittedJobInfo) -> bool:
        """A task that failed only because its lease expired after its outputs were written (its report was lost
        in an outage) is not reported failed (Snakemake would delete those outputs and evaluate the batch again):
        it is requeued for a worker to adopt the lost run's result."""
        run_id = lost_report_run(task, list(job_info.aux.get("outputs", [])))
        if run_id is None:
            return False
        try:
            requeue_for_adoption(self.client, task, run_id)
        except Exception as error:  # reported failed after all: Snakemake's retry evaluates it again
            self.logger.warning(f"[labtasker] task {task.id}: could not requeue it for adoption: {error}")
            return False
        self.logger.info(
            f"[labtasker] task {task.id}: its lease expired after its outputs were written (run {run_id}; a lost "
            "report?): requeued for a worker to adopt that run's result instead of evaluating it again"
        )
        return True

    def _warn_without_workers(self, tasks: dict[str, Task], now: float | None = None) -> None:
        """Nothing claimed for no_worker_warning_s and no worker registered on the queue and route: say so, with
        the command that starts one (again every 5 minutes while it lasts)."""
        now = time.monotonic() if now is None else now
        threshold = self.settings.no_worker_warning_s
        if threshold <= 0 or not tasks or any(task.status != "pending" for task in tasks.values()):
            self._unclaimed_since = None
            return
        if self._unclaimed_since is None:
            self._unclaimed_since = now
        waited = now - self._unclaimed_since
        if waited < threshold or now - self._workers_checked < threshold or now - self._warned_no_worker < 300:
            return
        self._workers_checked = now
        try:
            workers = registered_workers(self.client, self.route)
        except Exception as error:  # a server without worker observations: no warning rather than a false one
            self.logger.debug(f"[labtasker] cannot count workers: {error}")
            return
        if workers and self.refusals.refusing_workers() < workers:
            return
        self._warned_no_worker = now
        why = "no worker is registered there"
        if workers:
            refused = self.refusals.note()
            why = f"the {workers} registered worker(s) refuse this campaign's tasks{refused}; fix their nodes"
        self.logger.warning(
            f"[labtasker] nothing claimed for {waited:.0f}s: {len(tasks)} task(s) queued on queue {self.queue}, "
            f"route {self.route}, and {why}. Start one (on a GPU node, any time): {self.worker_command()}"
        )
