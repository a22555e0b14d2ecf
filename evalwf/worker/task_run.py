"""The run of one claimed task: its payload checked against the worker's allow-list and the plan
(evalwf/worker/job_payload.py), a lost run's result adopted, the node checked for its benchmark, the policy server
leased, the job step run with its environment, its declared outputs checked, and the outcome reported."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalwf.contract import CLIENT_TOKEN_ENV, TASK_ID_ENV, WORKER_ID_ENV
from evalwf.contract.failure import failure_text, read_cause
from evalwf.contract.failure_record import FailureRecord, last_lines, write_failure_record
from evalwf.contract.job_step_context import JobStepContext
from evalwf.contract.loopback import with_loopback_no_proxy
from evalwf.policy.client import PolicyServerError
from evalwf.worker.completion_record import lost_run, recorded_result, write_record
from evalwf.worker.job_payload import JobStep, NotForThisWorker, TaskRefused, validate_task
from evalwf.worker.job_steps import JobSteps, cause_path
from evalwf.worker.log import log
from evalwf.worker.node_gate import NodeGate
from evalwf.worker.policy_breaker import WorkerBreakers
from evalwf.worker.reporting import QueueReports
from evalwf.worker.shared_server import SharedPolicyServer, Stopping
from evalwf.worker.status_file import WorkerStatus

LOCAL_WORKERS_ENV = "EVAL_LOCAL_WORKERS"  # GPU workers started together on this machine (by the supervisor)
# What a worker's own queue client reads and nothing it starts may inherit.
NOT_INHERITED = (CLIENT_TOKEN_ENV, "LABTASKER_RUN_ID")


class TaskRun:
    """What a worker's slots share to run their claimed tasks."""

    def __init__(
        self,
        *,
        worker_id: str,
        gpu: str,
        slots: int,
        allowed: list[str],
        allowed_configs: list[str] | None,
        heartbeat_s: float,
        stop: threading.Event,
        server: SharedPolicyServer,
        breakers: WorkerBreakers,
        gate: NodeGate,
        status: WorkerStatus,
        reports: QueueReports,
        steps: JobSteps,
    ):
        self.worker_id, self.gpu, self.slots = worker_id, gpu, slots
        self.host = status.identity["host"]
        self.allowed, self.allowed_configs = allowed, allowed_configs
        self.heartbeat_s = heartbeat_s
        self.stop = stop
        self.server, self.breakers, self.gate = server, breakers, gate
        self.status, self.reports, self.steps = status, reports, steps
        self.foreign: set[str] = set()  # campaigns whose workflow directory is not allowed here

    def hand_back_foreign(self, client: Any, claim: Any, slot: int, campaign: str | None, reason: str | None) -> None:
        """Not for this worker: back to the queue uncharged (unclaim), and this campaign is not claimed again."""
        if campaign is not None and campaign not in self.foreign:
            self.foreign.add(campaign)
            log(f"slot {slot}: campaign {campaign} is not served by this worker: its tasks are handed back from now on")
        self.status.count("not_ours")
        self.hand_back(client, claim, slot, reason or f"campaign {campaign} is not served by this worker")

    def hand_back(self, client: Any, claim: Any, slot: int, why: str) -> None:
        """Back to the queue uncharged; the log line follows the queue's answer, so whoever reads "handed back" in
        the log finds the task pending, not still claimed by this slot."""
        if self.reports.report(client, claim, "unclaim"):
            log(f"slot {slot}: handed task {claim.task.id} back uncharged: {why}")
        else:
            log(f"slot {slot}: task {claim.task.id} not handed back ({why}); its lease expiry hands it back")

    def execute(self, client: Any, claim: Any, slot: int) -> bool:
        """Run one claimed task; False when it was not for this worker (handed back uncharged)."""
        task = claim.task
        started = time.monotonic()
        log(f"slot {slot}: claimed task {task.id} {task.name or ''} (attempt {task.attempt}/{task.max_attempts})")
        try:
            step = validate_task(task.args, self.allowed, self.allowed_configs)
        except NotForThisWorker as error:
            self.hand_back_foreign(client, claim, slot, error.campaign, str(error))
            return False
        except TaskRefused as error:
            log(f"slot {slot}: refusing task {task.id} (failed with the reason; every worker refuses it): {error}")
            self.status.count("refused")
            message = f"worker {self.worker_id}: {error}"
            self.reports.report(client, claim, "fail", error_type="TaskRefused", message=message)
            return True
        if self._adopt_lost_run(client, claim, slot, step) or self._adopt_finished(client, claim, slot, step):
            return True
        step = step.replacing_outputs()
        unfit = self.gate.refusal(step.target_jobs, list(step.configfiles), step.campaign)
        if unfit is not None:  # never run, never charged: a worker whose node can run it takes it
            self.status.count("node_unfit")
            self.hand_back(client, claim, slot, unfit)
            self.stop.wait(self.gate.backoff_s())
            return False
        self.status.started(task.id, task.name or "")
        self.status.write()
        log_path = Path(step.workdir) / ".snakemake" / "labtasker" / "tasks" / task.id / f"{claim.run_id}.log"
        revoked = threading.Event()
        heartbeat = threading.Thread(
            target=self.reports.heartbeats, args=(claim, revoked, self.heartbeat_s), daemon=True
        )
        heartbeat.start()
        try:
            if step.policy is not None:
                try:
                    self.breakers.check(step)
                    guard = self.breakers.start_guard(step, self.stop)
                    with self.server.lease(step.policy, self.stop, guard) as served:
                        self.status.write()
                        env = self._job_env(task.id, replace(served, cause_file=str(cause_path(log_path))))
                        outcome = self._start_step(client, claim, slot, step, env, log_path, revoked)
                except Stopping:
                    outcome = "stopped"
                except PolicyServerError as error:
                    if self.stop.is_set():
                        outcome = "stopped"
                    else:
                        log(f"slot {slot}: policy server for task {task.id} failed: {error}")
                        self.status.count("failed")
                        error_type = getattr(error, "error_type", "PolicyServerError")
                        self._record_failure(claim, step, f"{error_type}: {error}", log_path)
                        self.reports.report(
                            client,
                            claim,
                            "fail",
                            error_type=error_type,
                            message=f"worker {self.worker_id} (gpu {self.gpu}): {error}",
                        )
                        return True
            else:
                env = self._job_env(task.id, JobStepContext(cause_file=str(cause_path(log_path))))
                outcome = self._start_step(client, claim, slot, step, env, log_path, revoked)
        finally:
            revoked.set()  # also stops the heartbeat thread
        try:  # reported first: a heartbeat still waiting for a slow server must not delay a stopping worker's hand-back
            self._report_outcome(client, claim, slot, step, outcome, log_path, round(time.monotonic() - started, 3))
        finally:
            heartbeat.join(5)
        return True

    def _report_outcome(
        self, client: Any, claim: Any, slot: int, step: JobStep, outcome: int | str, log_path: Path, duration: float
    ) -> None:
        """Handed back (stopped), lost (revoked), succeeded (exit 0 and every declared output there) or failed."""
        task = claim.task
        where = f"{self.host}:{log_path}"
        if outcome == "stopped":
            if self.reports.report(client, claim, "unclaim"):
                log(f"slot {slot}: handed task {task.id} back (uncharged)")
                self.status.count("handed_back")
            else:
                log(f"slot {slot}: could not hand task {task.id} back; it comes back when its lease expires")
        elif outcome == "revoked":
            log(f"slot {slot}: task {task.id} was cancelled or its lease expired; job step killed")
            self.status.count("lost")
        elif outcome == 0:
            missing = [p for p in step.outputs if not os.path.exists(p)]
            if missing:
                self.status.count("failed")
                message = (
                    f"the job step exited 0 on {self.worker_id} but did not produce {missing} (did the submitting "
                    f"snakemake exit? a job step started after its submitter exited does nothing); log {where}"
                )
                log(f"slot {slot}: task {task.id}: {message}")
                self._record_failure(claim, step, f"MissingOutputs: {message}", log_path)
                self.reports.report(client, claim, "fail", error_type="MissingOutputs", message=message)
            else:
                self.status.count("succeeded")
                self.breakers.batch_done(step, task.id, ok=True)
                log(f"slot {slot}: task {task.id} succeeded in {duration:.1f}s")
                result = {
                    "worker": self.worker_id,
                    "gpu": self.gpu,
                    "worker_log": where,
                    "duration_s": duration,
                    "policy_server_loads": self.server.server.loads,
                }
                try:  # before the report: should it be lost, the run's success is still known (exactly once)
                    write_record(step.workdir, task.id, claim.run_id, step.outputs, result)
                except OSError as error:
                    log(f"slot {slot}: task {task.id}: could not record its success ({error})")
                self.reports.report(client, claim, "complete", result=result)
        else:
            self.status.count("failed")
            cause = read_cause(cause_path(log_path))
            self.breakers.batch_done(step, task.id, ok=False, log_path=log_path, cause=cause)
            exited = f"job step exited with status {outcome} on {self.worker_id} (gpu {self.gpu})"
            if cause is None:  # it failed before its job body could say why (a Snakemake error): the log's end
                message = failure_text(f"JobStepFailed: {exited}", where, _tail(log_path))
            else:
                message = failure_text(cause, where, exited)
            log(f"slot {slot}: task {task.id} failed (exit {outcome}): {cause or 'no cause recorded'}; log {log_path}")
            self._record_failure(claim, step, message.splitlines()[0], log_path)
            self.reports.report(client, claim, "fail", error_type="JobStepFailed", message=message)

    def _record_failure(self, claim: Any, step: JobStep, cause: str, log_path: Path) -> None:
        """Keep why the batch failed beside its outputs, under results/ (evalwf/contract/failure_record.py): the queue
        and this run's log may be gone (`make clean`) when someone asks. Before the report, as a success's record."""
        task = claim.task
        snakemake_attempt = step.payload.attempt if step.payload is not None else None
        attempt = f"labtasker {task.attempt}/{task.max_attempts}" + (
            f", Snakemake attempt {snakemake_attempt}" if snakemake_attempt else ""
        )
        record = FailureRecord(
            cause=" ".join(cause.split()),
            task_id=task.id,
            attempt=attempt,
            worker=self.worker_id,
            log=f"{self.host}:{log_path}",
            log_tail=last_lines(_tail(log_path)),
            failed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        for problem in write_failure_record(step.outputs, record):
            log(f"task {task.id}: could not keep its failure record ({problem})")

    def _adopt_lost_run(self, client: Any, claim: Any, slot: int, step: JobStep) -> bool:
        """A run of this task lost its lease after its job step had succeeded (the report was lost in an outage):
        the task is completed with that run's result when its outputs are unchanged and valid, and the batch is
        never evaluated again (evalwf/worker/completion_record.py)."""
        task = claim.task
        run_id = lost_run(task)
        if run_id is None:
            return False
        result, why = recorded_result(step.workdir, task.id, run_id, step.outputs)
        if result is not None:
            try:
                step.check_outputs()
            except (OSError, ValueError) as error:
                result, why = None, str(error)
        if result is None:
            log(f"slot {slot}: task {task.id}: its run {run_id} lost its lease and is not adopted ({why}); running it")
            return False
        log(
            f"slot {slot}: task {task.id}: adopted the result of its run {run_id}, which finished but whose report "
            "was lost (outputs unchanged and valid); not evaluated again"
        )
        self.status.count("adopted")
        adopted = {**result, "adopted_run": run_id, "adopted_by": self.worker_id}
        self.reports.report(client, claim, "complete", result=adopted)
        return True

    def _adopt_finished(self, client: Any, claim: Any, slot: int, step: JobStep) -> bool:
        """Outputs that exist and validate are the job's result, whoever queued the task (a crafted task, a stale
        one): the task is completed without a job step, and the batch is never evaluated again (invariant 7)."""
        if not step.finished():
            return False
        task = claim.task
        log(f"slot {slot}: task {task.id}: its outputs exist and are valid; adopted, not evaluated again")
        self.status.count("adopted")
        result = {"worker": self.worker_id, "gpu": self.gpu, "adopted": "outputs exist and are valid"}
        self.reports.report(client, claim, "complete", result=result)
        return True

    def _job_env(self, task_id: str, context: JobStepContext) -> dict[str, str]:
        """The job step's environment: the worker's own without its queue secrets, its GPU and what the worker tells
        it in one typed object (evalwf.contract.job_step_context)."""
        env = dict(with_loopback_no_proxy(dict(os.environ)))
        env["CUDA_VISIBLE_DEVICES"] = self.gpu
        env[WORKER_ID_ENV] = self.worker_id
        env[TASK_ID_ENV] = task_id
        for key in NOT_INHERITED:
            env.pop(key, None)
        env.update(cpu_render_threads(env, self.slots * int(os.environ.get(LOCAL_WORKERS_ENV, "1"))))
        env.update(context.to_env())  # replaces any the worker itself inherited
        return env

    def _start_step(
        self,
        client: Any,
        claim: Any,
        slot: int,
        step: JobStep,
        env: dict[str, str],
        log_path: Path,
        revoked: threading.Event,
    ) -> int | str:
        """The queue is told the step starts (unless its task was cancelled meanwhile: "revoked"); then it runs."""
        if not self.reports.step_starts(client, claim, self.worker_id, log_path):
            return "revoked"
        return self.steps.run(slot, step, env, log_path, revoked)


def cpu_render_threads(env: dict[str, str], parallel_jobs: int) -> dict[str, str]:
    """Without an NVIDIA driver, simulators render on llvmpipe, which by default starts one thread per core in
    every job: split the cores between the job slots of this machine instead (measured ~1.7x throughput for two
    LIBERO envs on 2 cores with one thread each). Explicit settings win."""
    if "LP_NUM_THREADS" in env or os.path.exists("/proc/driver/nvidia"):
        return {}
    return {"LP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, parallel_jobs)))}


def _tail(path: Path, max_chars: int = 3000) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_chars))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
