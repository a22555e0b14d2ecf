"""The submitter's side of the per-policy circuit breaker (the state and its rules: evalwf.queue.breaker).

A submission begins a new breaker generation (each `snakemake` run tries every policy afresh) and first names the
policies that the previous one stopped. Every status round it looks for policies whose breaker the workers
opened; for each one it prints ONE message (the policy, the reason, its log and where that log is), cancels the
policy's queued tasks with the reason recorded in them, and from then on reports that policy's jobs failed
without a line each and without submitting them (Snakemake's --retries then finds nothing to start either).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from evalwf.common.commands import evalwf_command
from evalwf.queue.breaker import (
    CIRCUIT_OPEN_ERROR,
    OpenRecord,
    begin_generation,
    current_generation,
    open_policies,
)
from snakemake_executor_plugin_labtasker.cancellation import PARKED_ROUTE, _id_chunks, cancel_tasks

if TYPE_CHECKING:
    from labtasker.models import Task

DETAIL_LINES = 8  # of the log, in the one message
# A stopped policy's tasks that fail for these reasons were said once, in its message.
QUIET_ERRORS = frozenset({CIRCUIT_OPEN_ERROR, "PolicyServerError"})


def stop_message(record: OpenRecord, cancelled: int) -> str:
    """The one message of a stopped policy: what, why, which log on which host, its last lines, what now."""
    lines = [f"[labtasker] {record.summary()}."]
    detail = [line for line in record.detail.splitlines() if line.strip()][-DETAIL_LINES:]
    if detail:
        lines += ["  Its log, up to the error:", *(f"    | {line[:200]}" for line in detail)]
    lines.append(
        f"  Its other batches are reported failed without starting it again ({cancelled} queued task(s) cancelled); "
        "the other policies go on."
    )
    lines.append(
        f"  Fix it (`{evalwf_command('policy', 'check', '--configfile', '...')}` starts it once and shows what it "
        "answers), then rerun "
        "the same command: a new submission tries the policy again."
    )
    return "\n".join(lines)


def no_retry(job: Any) -> None:
    """No retry for a job of a stopped policy: Snakemake restarts a failed job while its restart_times exceed its
    attempt - 1 (printing "Trying to restart job N."), and the retry would only be failed without being submitted."""
    job.attempt = max(job.attempt, job.restart_times + 1)


def stop_queued_tasks(client: Any, task_ids: list[str], record: OpenRecord, log: Callable[[str], None]) -> list[str]:
    """Cancel the queued tasks among task_ids, each first parked (no worker claims it) with the breaker's reason
    in its result (what `labtasker task get` and `evalwf status` show). Labtasker 2.8 lets only the worker holding
    a task fail it: cancelled is the closest state a submitter can give."""
    from labtasker import LabtaskerError

    note = {"stopped_by": "policy circuit breaker", "policy_identity": record.identity, "reason": record.summary()}
    for ids in _id_chunks(task_ids):
        try:
            client.update_tasks(
                filter=f'status == "pending" and {ids}', changes={"routes": [PARKED_ROUTE], "result": note}
            )
        except LabtaskerError as error:
            log(f"[labtasker] could not park the queued tasks of policy {record.identity}: {error}")
    return cancel_tasks(client, task_ids, "", include_running=False, log=log, summary=False)


class PolicyStops:
    """Which policies this submission has stopped, and why."""

    def __init__(self, workdir: str, max_failures: int, warn: Callable[[str], None]):
        self.workdir = workdir
        self.max_failures = max_failures
        self.generation, previous = begin_generation(workdir, max_failures)
        self.stopped: dict[str, OpenRecord] = {}
        for record in open_policies(workdir, previous.id).values():
            retry = f"at most {max_failures} more failed start(s)" if max_failures else "the breaker is off (0)"
            warn(
                f"[labtasker] the previous submission in this directory stopped policy {record.identity}: "
                f"{record.reason} (log {record.log}). This submission tries it again ({retry}); if it is not "
                "fixed, it is stopped again with the same message."
            )

    def newly_stopped(self) -> dict[str, OpenRecord]:
        """Policies whose breaker opened since the last call (read from the workflow directory: a few files), in
        the latest generation: a second submitter of the same campaign begins its own, which the workers follow."""
        if not self.max_failures:
            return {}
        generation = current_generation(self.workdir).id
        found = {
            identity: record
            for identity, record in open_policies(self.workdir, generation).items()
            if identity not in self.stopped
        }
        self.stopped.update(found)
        return found

    def is_stopped(self, identity: str | None) -> bool:
        return identity is not None and identity in self.stopped

    def quiet(self, identity: str | None, task: Any) -> bool:
        """A task of a stopped policy that ended (or waits) for the reason its message gave: no line of its own."""
        if not self.is_stopped(identity):
            return False
        if task.status in ("pending", "cancelled"):
            return True
        error = getattr(task, "last_error", None)
        return task.status == "failed" and error is not None and error.type in QUIET_ERRORS


def queued_of(identity: str, jobs: Iterable[Any], tasks: dict[str, Task]) -> list[str]:
    """The pending tasks among the active jobs of a policy."""
    return [
        job.external_jobid
        for job in jobs
        if job.aux.get("policy_identity") == identity
        and (task := tasks.get(job.external_jobid)) is not None
        and task.status == "pending"
    ]
