"""Snakemake executor plugin routing each job through a Labtasker queue to elastic GPU workers.

    snakemake --profile profiles/labtasker [--configfile ...]      # submit / resume a campaign
    evalwf worker --gpus 0,1                                     # workers, on any machine, at any time

Its settings are in settings.py. Each job becomes one Labtasker task (prepared_task.py) whose payload is the
contract's TaskPayload and whose id is derived from the job's identity (task_identity.py), so a resubmitted or
restarted campaign finds its tasks instead of duplicating them (submission.py). One list query per status round
reports every active job (status_round.py, status_query.py); Ctrl-C cancels the campaign's queued tasks
(cancellation.py), also through `| tee`, with closed descriptors and on SIGHUP (terminal.py). Without a
configured URL an embedded Labtasker server is started on an owner-only Unix socket (evalwf/queue/resolver.py).
The labtasker client is imported lazily: this module must import even where labtasker is broken or absent, or every
snakemake call in the environment would fail.
"""

import contextlib
import os
import signal
from datetime import UTC, datetime
from typing import Any

import psutil
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

from evalwf.common.commands import evalwf_command
from evalwf.contract import CLIENT_URL_ENV, DEFAULT_QUEUE, campaign_key
from evalwf.contract.loopback import with_loopback_no_proxy
from evalwf.queue.embedded_server import EmbeddedServerKeeper
from evalwf.queue.endpoint import QueueEndpoint
from evalwf.queue.resolver import QueueUnavailable, ResolvedQueue, resolve_queue
from evalwf.queue.tls import connection_problem
from snakemake_executor_plugin_labtasker.cancellation import Cancelling
from snakemake_executor_plugin_labtasker.errors import WorkflowError
from snakemake_executor_plugin_labtasker.policy_breaker import PolicyStops
from snakemake_executor_plugin_labtasker.prepared_task import TaskSubmission
from snakemake_executor_plugin_labtasker.progress import CampaignProgress
from snakemake_executor_plugin_labtasker.scheduling import MODES as SCHEDULING_MODES
from snakemake_executor_plugin_labtasker.settings import ExecutorSettings, common_settings
from snakemake_executor_plugin_labtasker.status_query import StatusPoller
from snakemake_executor_plugin_labtasker.status_round import StatusRound, check_results_writable, registered_workers
from snakemake_executor_plugin_labtasker.task_identity import uncarried_refusal
from snakemake_executor_plugin_labtasker.terminal import (
    guard_closed_descriptors,
    interrupt_on_hangup,
    interrupt_on_terminate,
    survive_lost_terminal,
    to_controlling_terminal,
)
from snakemake_executor_plugin_labtasker.worker_refusals import WorkerRefusals

# what Snakemake's plugin registry and the tests take from this package
__all__ = [
    "Executor",
    "ExecutorSettings",
    "WorkflowError",
    "check_results_writable",
    "common_settings",
    "registered_workers",
    "submitter_queue",
]

# At import (Snakemake imports every executor plugin while it parses its command line, before it opens a file):
# a descriptor 1 or 2 closed at start would otherwise be taken by the next file opened (terminal.py).
guard_closed_descriptors()


def submitter_queue(settings: ExecutorSettings, workdir: str, logger: Any) -> ResolvedQueue:
    """The queue this submission uses: --labtasker-url, else what every client finds (evalwf.queue.resolver),
    the embedded server of the workflow directory started when it is not running."""
    try:
        return resolve_queue(
            workdir, url=settings.url, server_root=settings.server_root, log=logger.info, keeper_log=logger.warning
        )
    except QueueUnavailable as error:
        raise WorkflowError(f"labtasker executor: {error}") from None


class Executor(StatusRound, TaskSubmission, Cancelling, RemoteExecutor):
    """Each job one Labtasker task: submitted by TaskSubmission (prepared_task.py), followed by StatusRound
    (status_round.py), cancelled by Cancelling (cancellation.py); this class holds the queue and its client."""

    interrupted_by = "Ctrl-C"  # what stopped this submitter, named by the cancellation's summary line

    def __post_init__(self) -> None:
        settings: ExecutorSettings = self.workflow.executor_settings  # type: ignore[assignment]
        self.settings = settings
        # from here on a lost terminal costs its lines, never the cancellation (terminal.py)
        survive_lost_terminal(self.logger)  # type: ignore[arg-type]
        interrupt_on_hangup(self._hung_up, cancelling=lambda: getattr(self, "_cancelling", False))
        # started with SIGTERM ignored (scripts/slurm/submitter.sbatch: scancel and preemption leave the tasks queued
        # for the requeued job): Snakemake's own handler then stays, and SIGTERM cancels nothing
        self._sigterm_ignored = signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        self.workdir = os.path.realpath(os.getcwd())
        self.queue = settings.queue
        self.route = settings.route
        self.campaign = campaign_key(self.workdir)
        # what the workers allow (their --allow-workflow; by default the workflow directory they are started in)
        extra = [os.path.realpath(d) for d in (settings.allow_workflow or "").split(os.pathsep) if d]
        self.allowed = list(dict.fromkeys([self.workdir, *extra]))
        if not callable(getattr(self.workflow.persistence, "external_jobids", None)):
            raise WorkflowError(
                "labtasker executor: this Snakemake has no persistence.external_jobids, which resuming a killed "
                "submitter relies on; use the pinned snakemake (pyproject.toml)"
            )
        # refused here, before Snakemake runs any job (a local rule would write results/<run>/ first)
        general_args = self.workflow.spawned_job_args_factory.general_args(
            executor_common_settings=self.common_settings
        )
        refusal = uncarried_refusal(general_args)
        if refusal is not None:
            raise WorkflowError(f"labtasker executor: {refusal}")
        self.scheduling = settings.scheduling
        if self.scheduling not in SCHEDULING_MODES:
            raise WorkflowError(
                f"labtasker executor: --labtasker-scheduling {self.scheduling!r}: use {' or '.join(SCHEDULING_MODES)}"
            )
        if settings.policy_breaker is None or settings.policy_breaker < 0:
            raise WorkflowError(
                f"labtasker executor: --labtasker-policy-breaker {settings.policy_breaker}: use a number of failed "
                "starts >= 1, or 0 to never stop a policy"
            )
        # when this Snakemake process started (before it built the DAG): tasks that succeed after it are adopted
        self.started_at = datetime.fromtimestamp(psutil.Process().create_time(), tz=UTC)
        with_loopback_no_proxy(os.environ)  # before any httpx client exists
        resolved = submitter_queue(settings, self.workdir, self.logger)
        assert resolved.endpoint is not None  # a submitter starts the embedded server when it is not running
        self.endpoint: QueueEndpoint = resolved.endpoint
        self.keeper: EmbeddedServerKeeper | None = resolved.keeper
        if resolved.warning:
            self.logger.warning(f"[labtasker] {resolved.warning}.")
        self._client: Any = None
        self._status: dict[str, str] = {}
        self._missing_rounds: dict[str, int] = {}
        self._query_errors = 0
        self._cancelling = False
        self.poller = StatusPoller(self.campaign)
        self.progress = CampaignProgress()
        # a policy that never starts costs a few starts, not one per batch (invariant 11)
        self.stops = PolicyStops(self.workdir, settings.policy_breaker, warn=self.logger.warning)
        self.refusals = WorkerRefusals(self.campaign, self.route)  # what workers refuse of this campaign, and why
        self._unclaimed_since: float | None = None  # since when every active task is pending
        self._workers_checked = 0.0
        self._warned_no_worker = float("-inf")
        try:
            self.client.create_queue(self.queue)
        except Exception as error:
            raise WorkflowError(
                f"labtasker executor: cannot reach the Labtasker server at {self.endpoint} (queue {self.queue}): "
                f"{connection_problem(error, str(self.endpoint))}"
            ) from None
        self.logger.info(
            f"[labtasker] queue {self.queue} on {self.endpoint}; start workers with: {self.worker_command()}"
        )

    def _hung_up(self) -> None:
        self.interrupted_by = "SIGHUP (the terminal went away)"

    def _terminated(self) -> None:
        self.interrupted_by = "SIGTERM"

    def _take_sigterm(self) -> None:
        """Once, at the first submission (Snakemake's scheduler installs its own SIGTERM handler after making the
        executor): SIGTERM cancels as Ctrl-C does (terminal.interrupt_on_terminate). Not where SIGTERM was ignored
        at the start, nor in an executor made without __post_init__ (a test's): its process is no submitter."""
        if not getattr(self, "_sigterm_taken", False) and not getattr(self, "_sigterm_ignored", True):
            self._sigterm_taken = True
            interrupt_on_terminate(self._terminated, cancelling=lambda: getattr(self, "_cancelling", False))

    def _announce(self, line: str) -> None:
        """The outcome of a cancellation: to the log (its terminal stream and its file) and to the controlling
        terminal when the terminal stream did not reach it (a pipe into `tee`, which the same Ctrl-C killed)."""
        self.logger.info(line)
        to_controlling_terminal(line, self.logger)  # type: ignore[arg-type]

    def worker_command(self) -> str:
        """The command that starts a worker for this submission's queue and route (workers of this machine find
        the embedded server themselves; a URL is theirs to know, with $LABTASKER_TOKEN), by this environment's
        absolute `evalwf`, so that it runs as printed in a shell where the environment is not activated."""
        return evalwf_command("worker", "--gpus", "0", "--queue", self.queue, "--route", self.route)

    def task_command(self, task_id: str) -> str:
        """`evalwf task <id>` as it works when pasted into a fresh shell: this environment's absolute evalwf, this
        queue, the server when it was given on the command line."""
        command = evalwf_command("task", task_id)
        if self.queue != DEFAULT_QUEUE:
            command += f" --queue {self.queue}"
        if self.settings.url and not os.environ.get(CLIENT_URL_ENV):
            command += f" --url {self.settings.url}"
        if os.path.realpath(os.environ.get("PWD") or self.workdir) != self.workdir:  # snakemake --directory
            command += f" --workdir {self.workdir}"
        return command

    def _recover_server(self) -> None:
        """The queue did not answer: if it is our embedded server, find or restart it (same socket and database)
        and reconnect, so a killed server never strands this submitter."""
        if self.keeper is None:
            return
        endpoint = self.keeper.recover()
        if endpoint != self.endpoint:
            self.endpoint = endpoint
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
            self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.endpoint.client(self.queue)
        return self._client
