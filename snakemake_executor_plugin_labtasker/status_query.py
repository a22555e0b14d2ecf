"""Status rounds whose cost does not grow with the campaign, and the failure report for a failed task (its cause
first: evalwf.contract.failure)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from evalwf.common.commands import evalwf_command
from evalwf.contract.failure import excerpt

if TYPE_CHECKING:
    from labtasker.models import Task

PAGE_LIMIT = 1000  # Labtasker's maximum page size
# A filter is at most 8192 bytes; an id is 14 characters plus quoting and separators.
MAX_IDS_PER_FILTER = 400


def _id_filter(task_ids: list[str]) -> str:
    return "id in [" + ", ".join(json.dumps(t) for t in task_ids) + "]"


def _list_all(client: Any, query: str, order_by: str = "created_at") -> list[Any]:
    found: list[Any] = []
    cursor = None
    while True:
        page = client.list_tasks(filter=query, limit=PAGE_LIMIT, cursor=cursor, order_by=order_by)
        found += page.items
        cursor = page.next_cursor
        if not cursor or not page.items:
            return found


def query_tasks(client: Any, task_ids: Iterable[str], campaign: str) -> dict[str, Task]:
    """Current state of the given tasks, asked for by id in chunks of MAX_IDS_PER_FILTER (one call up to that
    many; never the whole campaign, whose finished tasks would come back too)."""
    del campaign  # the ids select exactly what is asked for
    wanted = sorted(set(task_ids))
    found: dict[str, Task] = {}
    for start in range(0, len(wanted), MAX_IDS_PER_FILTER):
        for task in _list_all(client, _id_filter(wanted[start : start + MAX_IDS_PER_FILTER])):
            found[task.id] = task
    return found


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class StatusPoller:
    """The state of the active jobs' tasks at a cost that does not grow with the campaign.

    The first round (and every `reconcile_every`-th) asks for the active tasks by id; the rounds between ask
    only for the campaign's tasks updated since the previous round began, less `overlap_s` (an update stamped
    just before a round but committed just after it, or a server clock a little behind this one, is not
    missed): nothing at all while nothing happens. The reconciling rounds by id also find deleted tasks (a
    task they do not find is reported missing) and anything a badly skewed server clock hid."""

    def __init__(self, campaign: str, *, reconcile_every: int = 60, overlap_s: float = 5.0):
        self.campaign = campaign
        self.reconcile_every = reconcile_every
        self.overlap = timedelta(seconds=overlap_s)
        self.latest: dict[str, Task] = {}
        self.previous_round: datetime | None = None
        self.rounds = 0
        self.last_fetched = 0  # tasks the last round downloaded (for tests and benchmarks)

    def poll(self, client: Any, task_ids: Iterable[str]) -> dict[str, Task]:
        wanted = set(task_ids)
        started = datetime.now(UTC)
        if self.previous_round is None or self.rounds % self.reconcile_every == 0:
            fetched = list(query_tasks(client, wanted, self.campaign).values())
            self.latest = {task.id: task for task in fetched}
        else:
            since = _rfc3339(self.previous_round - self.overlap)
            query = f"metadata.campaign == {json.dumps(self.campaign)} and updated_at >= {json.dumps(since)}"
            fetched = _list_all(client, query, order_by="updated_at")
            unknown = wanted - set(self.latest) - {task.id for task in fetched}
            if unknown:  # submitted since the last round
                fetched += list(query_tasks(client, unknown, self.campaign).values())
            for task in fetched:
                self.latest[task.id] = task
        self.rounds += 1
        self.previous_round = started
        self.last_fetched = len(fetched)
        self.latest = {task_id: task for task_id, task in self.latest.items() if task_id in wanted}
        return dict(self.latest)


def _log_of(task: Any) -> str | None:
    result = task.result or {}
    if isinstance(result, dict) and result.get("worker_log"):
        return str(result["worker_log"])
    return None


def failure_message(task: Any, queue: str, job_logs: list[str], inspect: str | None = None) -> str:
    """Why the task failed, first (the failed job's own exception, `Type: text`) and where its full log is; then
    the task, its state, the other logs and the command that shows the task (`inspect`)."""
    parts = []
    error = task.last_error
    shown = excerpt(error.type, error.message) if error is not None else None
    if shown is not None:
        parts.append(shown.cause)
        if shown.log:
            parts.append(f"Full log: {shown.log}")
    elif task.status == "cancelled":
        parts.append("The task was cancelled (labtasker cancel / Ctrl-C of a submitter).")
    attempts = f"{task.attempt}/{task.max_attempts}"
    state = f"Labtasker task {task.id} (queue {queue}) is {task.status} after attempt {attempts}"
    parts.append(state + (f" ({error.type}, run {error.run_id})." if error is not None else "."))
    if shown is not None and shown.details:
        parts.append(shown.details)
    worker_log = _log_of(task)
    if worker_log:
        parts.append(f"Worker log: {worker_log}")
    existing = [path for path in job_logs if os.path.exists(path)]
    if job_logs:
        parts.append(f"Job log(s): {', '.join(job_logs)}" + ("" if existing else " (not written)"))
    parts.append(f"Inspect: {inspect or evalwf_command('task', task.id, '--queue', queue)}")
    return "\n".join(parts) + "\n"
