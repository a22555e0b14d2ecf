"""What a run's state is, read from its files and its queue: the plan of the run (its campaign snapshot), each
planned batch's state (a valid result file, else its Labtasker task's), and the workers of the workflow directory
(their status.json files). `evalwf status` (evalwf/report/status.py) renders it; `evalwf task` reads the queue the
same way.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import yaml

from evalwf.common.errors import ResultValidationError
from evalwf.contract.failure import excerpt
from evalwf.contract.failure_record import read_failure_record
from evalwf.plan.campaign import BatchPlan, Campaign, PolicyCampaign
from evalwf.plan.config import validate_config
from evalwf.plan.manifest import load_manifest
from evalwf.plan.results import validate_batch_result
from evalwf.plan.rounds import RoundProgress, adaptive_benchmarks, batch_round, round_progress, written_decisions
from evalwf.queue.resolver import resolve_queue
from evalwf.report.adaptive import surely_continuing_from_start

if TYPE_CHECKING:
    from evalwf.queue.endpoint import QueueEndpoint

FAILED_STATES = ("failed", "invalid")
# A batch whose task its submitter cancelled (Ctrl-C, SIGHUP, SIGTERM): not a failure, work to resume. A task its
# policy's circuit breaker cancelled is shown failed (queue_state): its policy is broken.
CANCELLED = "cancelled"
# per adaptive benchmark: the decisions written so far, and each policy's standing by them


class BatchRow(TypedDict, total=False):
    """One planned batch in the status table (batch_rows): always its place, size and state; an adaptive sweep's
    round; a failed or invalid one's reason and logs, and what its failure record says."""

    benchmark: str  # several policies: <policy>/<benchmark>
    suite: str
    task: str
    batch: str  # its episode range label
    episodes: int
    successes: int
    state: str  # done, invalid, not submitted, waiting, or its queue state
    round: int
    dropped: str
    error: str
    log: str
    recorded: str


AdaptiveRounds = dict[str, tuple[list[dict[str, Any]], dict[str, RoundProgress]]]
EXIT_COMPLETE, EXIT_INCOMPLETE, EXIT_FAILED, EXIT_CANCELLED = 0, 1, 2, 3
# the queue status was asked for (a URL, or the embedded server it found) could not be read: the files alone cannot
# say what is pending, running or failed there, so "complete" would be a guess
EXIT_QUEUE_UNREACHABLE = 4
# a process's start time as psutil reads it is exact to the clock tick; a pid whose process started more than this
# apart from the worker's recorded start is another process that was given the same pid
PROCESS_START_TOLERANCE_S = 1.0
RESUME_HINT = "cancelled by its submitter (Ctrl-C, SIGHUP or SIGTERM): rerun the same snakemake command to resume"


class QueueTask(dict):
    """What status needs of a Labtasker task: its state and, when it failed, why."""

    @property
    def state(self) -> str:
        return self["state"]


def load_run(run_dir: Path, workdir: Path) -> Campaign:
    snapshot_path = run_dir / "campaign.yaml"
    if not snapshot_path.exists():
        raise SystemExit(f"{snapshot_path} not found: is {run_dir} a run directory (results/<run>) of a started run?")
    snapshot = yaml.safe_load(snapshot_path.read_text())
    snapshot.pop("policy_identity", None)
    snapshot.pop("policy_identities", None)  # a run of several policies
    snapshot.pop("benchmark_policies", None)
    config = validate_config(snapshot)
    if not Path(config.results_dir).is_absolute():
        config = config.with_results_dir(str(workdir / config.results_dir))
    campaign = Campaign(config)
    for benchmark in campaign.benchmarks:  # without it, its manifest names here would be none of the run's
        reason = campaign.environment_unavailable(benchmark)
        if reason:
            raise SystemExit(f"status of {run_dir}: {benchmark}'s environment cannot be read here ({reason})")
    return campaign


def status_queue(workdir: Path, url: str | None) -> QueueEndpoint | None:
    """The queue of `workdir` as every client finds it (evalwf.queue.resolver), looking only: the embedded server
    is never started from here; None when there is no queue (never started)."""
    return resolve_queue(workdir, url=url, start=False).endpoint


@contextlib.contextmanager
def queue_client(workdir: Path, url: str | None, queue: str) -> Iterator[Any]:
    """A Labtasker client of the queue (status_queue); None when there is no queue. The client announces its
    connection on stderr: it is kept quiet here (errors still raise)."""
    from evalwf.contract.loopback import with_loopback_no_proxy

    with_loopback_no_proxy(os.environ)
    endpoint = status_queue(workdir, url)
    if endpoint is None:
        yield None
        return
    with contextlib.redirect_stderr(io.StringIO()):
        client = endpoint.client(queue)
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.close()


def queue_states(campaign_dir: Path, url: str | None, queue: str) -> dict[str, QueueTask] | None:
    """Absolute output path -> {state, task_id, error, error_log} of its newest Labtasker task; None if there is
    no queue."""
    from evalwf.contract import campaign_key

    with queue_client(campaign_dir, url, queue) as client, contextlib.redirect_stderr(io.StringIO()):
        if client is None:
            return None
        latest: dict[str, Any] = {}  # a changed policy gives a batch a new task: the newest one counts
        cursor = None
        query = f"metadata.campaign == {json.dumps(campaign_key(str(campaign_dir)))}"
        while True:
            page = client.list_tasks(filter=query, limit=1000, cursor=cursor)
            for task in page.items:
                for output in (task.args or {}).get("outputs", []):
                    key = os.path.normpath(output)
                    if key not in latest or task.updated_at > latest[key].updated_at:
                        latest[key] = task
            cursor = page.next_cursor
            if not cursor or not page.items:
                break
    return {key: QueueTask(state=queue_state(task), task_id=task.id, **_error_of(task)) for key, task in latest.items()}


def queue_state(task: Any) -> str:
    """The task's state as status shows it: Labtasker's, except that a task its policy's circuit breaker cancelled
    is failed (the policy is broken: resuming would not help), while one its submitter cancelled stays cancelled."""
    result = getattr(task, "result", None)
    if task.status == CANCELLED and isinstance(result, dict) and result.get("stopped_by"):
        return "failed"
    return str(task.status)


def _error_of(task: Any) -> dict[str, str | None]:
    """The task's error as status shows it (_error_text) and the full log its error names, if any."""
    error = _last_error(task)
    return {"error": _error_text(task), "error_log": excerpt(*error).log if error else None}


def _error_text(task: Any) -> str:
    """The cause of a task's last error (`Type: text`, what failed the job itself), or why its policy's circuit
    breaker cancelled it."""
    error = _last_error(task)
    if error is None:
        result = getattr(task, "result", None)  # a queued task its policy's circuit breaker cancelled says why
        return str(result.get("reason", "")) if isinstance(result, dict) and result.get("stopped_by") else ""
    return excerpt(*error).cause


def _last_error(task: Any) -> tuple[str, str] | None:
    error = getattr(task, "last_error", None)
    if not error:
        return None
    if isinstance(error, dict):
        return str(error.get("type") or ""), str(error.get("message") or "")
    return str(getattr(error, "type", "") or ""), str(getattr(error, "message", "") or "")


def batch_log_path(campaign: PolicyCampaign, batch: Any) -> Path:
    """The Snakemake log of a batch job (the pattern of workflow/rules/evaluate.smk)."""
    logs = campaign.benchmark_dir(batch.ref.benchmark) / "logs" / "batches"
    return logs / batch.ref.suite / batch.ref.task / f"{batch.episodes.label}.log"


def adaptive_rounds(campaign: Campaign) -> AdaptiveRounds:
    """Per adaptive benchmark, the decisions written so far and where each policy stands by them."""
    rounds = {}
    for benchmark in adaptive_benchmarks(campaign):
        decisions = written_decisions(campaign, benchmark)
        first_early = [] if decisions else surely_continuing_from_start(campaign, benchmark)
        rounds[benchmark] = (decisions, round_progress(campaign, benchmark, decisions, first_early))
    return rounds


def batch_rows(
    campaign: Campaign,
    states: dict[str, QueueTask] | None,
    workdir: Path | None = None,
    rounds: AdaptiveRounds | None = None,
) -> list[BatchRow]:
    """One row per planned batch: done (valid result file), invalid, or its queue state; failed and invalid
    rows carry the reason and where to read more. Several policies: each policy's batches, as <policy>/<benchmark>.
    An adaptive sweep's rows follow its decisions: a dropped policy's rounds after its drop are no work of the
    run (no rows), and rounds not planned yet are `waiting` for a decision, not missing (`rounds`: adaptive_rounds,
    read here when not given)."""
    if not campaign.multi:
        return _policy_batch_rows(campaign.single(), states, workdir, {})
    rounds = adaptive_rounds(campaign) if rounds is None else rounds
    rows = []
    for name, member in campaign.members.items():
        progress = {benchmark: policies[name] for benchmark, (_, policies) in rounds.items() if name in policies}
        rows += [
            {**r, "benchmark": f"{name}/{r['benchmark']}"}
            for r in _policy_batch_rows(member, states, workdir, progress)
        ]
    return rows


def _policy_batch_rows(
    campaign: PolicyCampaign,
    states: dict[str, QueueTask] | None,
    workdir: Path | None,
    progress: dict[str, RoundProgress],
) -> list[BatchRow]:
    rows = []
    for plan in campaign.tasks:
        manifest = None
        standing = progress.get(plan.ref.benchmark)
        for batch in plan.batches:
            round_index = batch_round(campaign.config, batch) if standing else None
            if standing and standing.dropped_after is not None and round_index > standing.dropped_after:
                continue  # a round its policy never runs
            row: BatchRow = {
                "benchmark": plan.ref.benchmark,
                "suite": plan.ref.suite,
                "task": plan.ref.task,
                "batch": batch.episodes.label,
                "episodes": batch.episodes.count,
                "successes": 0,
                "state": "not submitted",
            }
            if standing:
                row["round"] = round_index
                row["dropped"] = (
                    f"dropped after round {standing.dropped_after}" if standing.dropped_after is not None else ""
                )
                if round_index >= standing.planned:
                    row["state"] = "waiting"  # for the decision after round_index - 1, unless it already ran
            if Path(batch.path).exists():
                try:
                    manifest = manifest or load_manifest(plan.manifest_path, plan.manifest_hash)
                    result = validate_batch_result(batch.path, campaign.expectation(batch, manifest))
                    row.update(state="done", successes=result["success_count"])
                except (ResultValidationError, ValueError) as error:
                    row.update(state="invalid", error=str(error), log=str(batch.path))
            else:
                task = states.get(os.path.normpath(os.path.abspath(batch.path))) if states is not None else None
                if task is not None:
                    row["state"] = task.state
                    if task.state in FAILED_STATES:
                        logs = [str(batch_log_path(campaign, batch))]
                        if task.get("error_log"):  # the failed run's own log, which the error names
                            logs.insert(0, str(task["error_log"]))
                        elif workdir is not None:
                            logs.append(str(workdir / ".snakemake" / "labtasker" / "tasks" / task["task_id"]) + "/")
                        row.update(error=task["error"] or task.state, log=" ".join(logs))
                    elif task.state == CANCELLED:
                        row.update(error=RESUME_HINT)
                else:  # the queue does not know it (none, or a new one after `make clean`): its failure record
                    row.update(_recorded_failure(campaign, batch))
            rows.append(row)
    return rows


def _recorded_failure(campaign: PolicyCampaign, batch: BatchPlan) -> BatchRow:
    """The row fields of a batch's failure record (evalwf/contract/failure_record.py), or none: the cause, the
    logs (the run's own may be gone; the job's Snakemake log is under results/ too), attempt, worker, task."""
    record = read_failure_record(batch.path)
    if record is None:
        return {}
    return {
        "state": record.state,
        "error": record.cause,
        "log": f"{record.log} {batch_log_path(campaign, batch)}",
        "recorded": f"task {record.task_id}, {record.attempt}, worker {record.worker}, at {record.failed_at}",
    }


@dataclass(frozen=True)
class WorkerState:
    """A worker of the workflow directory as its status.json says, and whether it may still run."""

    worker: str  # its id
    alive: str  # "yes", "dead", "stopped", or "? (host H)" for a worker on another host, whose pid means nothing
    status: dict[str, Any]  # its status.json (evalwf/worker/status_file.py)


def read_workers(workdir: Path, *, history: bool = False) -> list[WorkerState]:
    """Workers of this workflow directory from the status.json each writes after every change: those that may
    still run (alive here, or on another host), and with `history` also the stopped and dead ones (every worker
    ever started here leaves its status.json behind)."""
    workers = []
    here = socket.gethostname()
    for path in sorted((workdir / ".snakemake" / "labtasker" / "workers").glob("*/status.json")):
        try:
            status = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now (written atomically, so only a race on a slow filesystem)
        if status.get("state") == "stopped":
            alive = "stopped"
        elif status.get("host") == here and status.get("pid"):
            alive = "yes" if _same_process_alive(int(status["pid"]), status.get("started_at")) else "dead"
        else:
            alive = f"? (host {status.get('host')})"
        if history or alive not in ("stopped", "dead"):
            workers.append(WorkerState(status.get("worker_id", path.parent.name), alive, status))
    return workers


def _same_process_alive(pid: int, started_at: float | None) -> bool:
    """The worker's own process still runs: its pid is alive AND started when the worker did (after a reboot or a
    kill -9, another process may hold the pid; a status.json of an older worker without a start time: pid only)."""
    import psutil

    try:
        created = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return started_at is None or abs(created - float(started_at)) < PROCESS_START_TOLERANCE_S


def exit_code(rows: list[BatchRow]) -> int:
    """EXIT_FAILED when a batch failed or is invalid, else EXIT_CANCELLED when one was cancelled (resumable), else
    complete or incomplete."""
    if any(r["state"] in FAILED_STATES for r in rows):
        return EXIT_FAILED
    if any(r["state"] == CANCELLED for r in rows):
        return EXIT_CANCELLED
    return EXIT_COMPLETE if all(r["state"] == "done" for r in rows) else EXIT_INCOMPLETE


def exit_code_without_queue(rows: list[BatchRow]) -> int:
    """The exit status when the queue could not be read: a failure the files show still reads as one (2), anything
    else as EXIT_QUEUE_UNREACHABLE, never 0: a script waiting on the run must not take it for complete."""
    code = exit_code(rows)
    return code if code == EXIT_FAILED else EXIT_QUEUE_UNREACHABLE


def settled(rows: list[BatchRow]) -> bool:
    """Nothing is pending or running: watching longer shows nothing new."""
    return not any(r["state"] in ("pending", "running") for r in rows)
