"""The prepared task: each job Snakemake hands over becomes a TaskSpec (task_identity.build_task_spec) checked as
the workers would check its code files, then is submitted with its scheduling priority (submission.py, a few
jobs at a time) and reported to Snakemake from its own thread. A job whose policy is stopped is failed
unsubmitted."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from evalwf.contract.affinity import task_routes
from evalwf.contract.allowed_files import changeable_refusal, placement_refusal, written_by_tools
from snakemake_executor_plugin_labtasker import submission as submitting
from snakemake_executor_plugin_labtasker.errors import WorkflowError
from snakemake_executor_plugin_labtasker.progress import episodes_of
from snakemake_executor_plugin_labtasker.scheduling import task_priority
from snakemake_executor_plugin_labtasker.task_identity import TaskSpec, build_task_spec

SUBMIT_TRIES = 3


@dataclass(frozen=True)
class PreparedTask:
    """A job ready to submit: its task, priority, and whether its incomplete marker names that task already."""

    job: JobExecutorInterface
    spec: TaskSpec
    priority: int
    resuming: bool


class TaskSubmission:
    """The Executor's submitting side (a mixin of snakemake_executor_plugin_labtasker.Executor, whose attributes it
    uses: client, settings, stops, progress, workdir, allowed, scheduling)."""

    def _external_jobids(self, job: JobExecutorInterface) -> list[str]:
        """The task ids this job's incomplete markers name (Snakemake's persistence, an internal API: its presence
        is checked at start-up and pinned by tests/plugin/test_snakemake_internals.py, so resuming never
        silently turns into delete-and-rerun). A marker that cannot be read names nothing."""
        try:
            return list(self.workflow.persistence.external_jobids(job))
        except (OSError, ValueError):
            return []

    def run_jobs(self, jobs: list[JobExecutorInterface]) -> None:  # type: ignore[override]
        """The jobs that became ready together, submitted concurrently (submission.SubmitPool), highest priority
        first: workers already waiting claim while the rest are still being queued, and take the longest batch
        queued so far, which is then the longest of all (Snakemake hands them over in its own order). Each job is
        still reported to Snakemake individually, from this thread."""
        self._take_sigterm()
        prepared = []
        for job in jobs:
            item = self._prepare_submission(job)
            if item is not None:
                self.run_job_pre(job)
                prepared.append(item)
        prepared.sort(key=lambda item: -item.priority)  # stable: fifo (one priority) keeps Snakemake's order
        self._submit_prepared(prepared)

    def run_job(self, job: JobExecutorInterface) -> None:
        self._take_sigterm()
        item = self._prepare_submission(job)
        if item is not None:
            self._submit_prepared([item])

    def _prepare_submission(self, job: JobExecutorInterface) -> PreparedTask | None:
        """None: the job's policy is stopped by its circuit breaker, and the job is reported failed unsubmitted."""
        try:
            spec = build_task_spec(
                job, workdir=self.workdir, snakefile=self.get_snakefile(), command=self.format_job_exec(job)
            )
        except ValueError as error:
            raise WorkflowError(f"labtasker executor: {error}") from None
        refusal = self._code_refusal(spec)
        if refusal is not None:
            raise WorkflowError(refusal)
        if self.stops.is_stopped(spec.payload.policy_identity):
            self._fail_quietly(SubmittedJobInfo(job))
            return None
        resuming = spec.task_id in self._external_jobids(job)
        self._status.setdefault(spec.task_id, "submitting")  # a Ctrl-C from here on cancels it too
        return PreparedTask(job, spec, task_priority(job, self.scheduling, self.settings.priority), resuming)

    def _code_refusal(self, spec: TaskSpec) -> str | None:
        """Why the workers would refuse this task's Snakefile or config files (the rule they apply:
        evalwf.contract.allowed_files), with the two ways out; None when they take them."""
        written = written_by_tools(self.workdir)
        named = [("Snakefile", spec.payload.snakefile)] + [("config file", p) for p in spec.payload.configfiles]
        for what, path in named:
            absolute = os.path.normpath(os.path.join(self.workdir, path))
            refusal = placement_refusal(absolute, what, self.allowed, written)
            if refusal is not None:
                where = os.path.dirname(absolute)
                return (
                    f"labtasker executor: the workers would refuse every task of this campaign, so none is created: "
                    f"{refusal}. Fix: move it into the workflow directory {self.workdir} (not into .snakemake, "
                    f".labtasker or the results), or start the workers with --allow-workflow {where} besides "
                    f"--allow-workflow {self.workdir} and submit with --labtasker-allow-workflow {where} (every "
                    "worker machine needs it at the same path)."
                )
            refusal = changeable_refusal(absolute, what)  # it says the fix itself
            if refusal is not None:
                return (
                    "labtasker executor: the workers would refuse every task of this campaign, so none is created: "
                    + refusal
                )
        return None

    def _submit_prepared(self, prepared: list[PreparedTask]) -> None:
        if not hasattr(self, "_submit_pool"):
            self._submit_pool = submitting.SubmitPool()
            self._recover_lock = threading.Lock()

        def recover() -> None:
            with self._recover_lock:
                self._recover_server()

        def submit(item: PreparedTask) -> submitting.Submission:
            spec = item.spec
            return submitting.submit_with_retries(
                lambda: submitting.submit_job_task(
                    self.client,
                    spec,
                    priority=item.priority,
                    max_attempts=self.settings.max_attempts,
                    routes=task_routes(self.route, spec.args),  # + its policy's affinity route
                    resuming=item.resuming,
                    started_at=self.started_at,
                ),
                recover=recover,
                stopped=lambda: self._cancelling,
                tries=SUBMIT_TRIES,
            )

        for item, submission, error in self._submit_pool.run(submit, prepared):
            job, spec = item.job, item.spec
            if isinstance(error, submitting.SubmissionStopped):
                continue  # Ctrl-C before it was sent: nothing to report or cancel
            if error is not None:
                self._status.pop(spec.task_id, None)
                self.report_job_error(
                    SubmittedJobInfo(job),
                    msg=f"could not submit Labtasker task {spec.task_id} to queue {self.queue}: {error}\n",
                )
                continue
            self._report_submission(job, spec, submission)

    def _report_submission(self, job: JobExecutorInterface, spec: TaskSpec, submission: submitting.Submission) -> None:
        self._status[submission.task_id] = submission.status
        episodes = episodes_of(job)
        self.logger.info(
            f"[labtasker] job {job.jobid} ({spec.name}) -> task {submission.task_id}: {submission.action} "
            f"({submission.status})"
        )
        self.report_job_submission(
            SubmittedJobInfo(
                job,
                external_jobid=submission.task_id,
                aux={
                    "logs": spec.logs,
                    "outputs": spec.outputs,
                    "name": spec.name,
                    "episodes": episodes,
                    "policy_identity": spec.payload.policy_identity,
                },
            )
        )
        self.progress.submitted(submission.task_id, episodes)
