"""One GPU worker: claims Labtasker tasks (Snakemake job steps) and runs them against its own policy server.

See evalwf/worker/main.py for what a worker does and its command line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalwf.common.atomic import atomic_write_text
from evalwf.contract import JOB_STEP_PROGRESS, TASK_ID_ENV, WORKER_ID_ENV, WORKER_REFUSING_KEY, campaign_key
from evalwf.contract.failure import CAUSE_FILE_ENV, failure_text, read_cause
from evalwf.policy.client import ENDPOINT_ENV, IDENTITY_ENV, PolicyServerError
from evalwf.queue.embedded_server import EmbeddedServerKeeper
from evalwf.queue.endpoint import QueueEndpoint
from evalwf.queue.tls import connection_problem
from evalwf.worker import queue_client
from evalwf.worker.completion_record import lost_run, recorded_result, write_record
from evalwf.worker.job_payload import JobStep, NotForThisWorker, TaskRefused, payload_campaign, validate_task
from evalwf.worker.log import log
from evalwf.worker.node_gate import NodeGate
from evalwf.worker.policy_breaker import WorkerBreakers
from evalwf.worker.policy_server import GuardedPolicyServer
from evalwf.worker.processes import GuardedProcess
from evalwf.worker.shared_server import SharedPolicyServer, Stopping
from evalwf.worker.warm_step import SpareStep

LOCAL_WORKERS_ENV = "EVAL_LOCAL_WORKERS"  # GPU workers started together on this machine (by the supervisor)
REPORT_DEADLINE_S = 120.0  # retrying a report through server trouble while running normally
STOP_REPORT_GRACE_S = 2.0  # ... and once told to stop: stopping stays prompt, the lease recovers the rest
# Once told to stop by a signal, the worker exits this long after the signal, once its job steps have ended, whether
# or not every slot has heard back from the server: a request to a hung server would block a slot for the client's
# 15 s timeout. A task whose hand-back did not get through comes back when its lease expires.
STOP_EXIT_S = 2.0
STOP_HAND_BACK_S = 1.5  # ... and at least this long after the last job step ended (its hand-back: one request)
# Labtasker's claim has no filter: a task of a campaign this worker does not serve is handed back at once, and the
# slot then waits this long (doubling up to the maximum) before claiming again, so that workers allowed there get it.
FOREIGN_BACKOFF_S = (1.0, 10.0)
SPARE_PRELOAD_AFTER_S = 2.0  # a job step's own start-up takes about a second: the next spare imports after it
STEP_GRACE_S = 10.0  # a stopped job step's group gets SIGTERM, then this long before SIGKILL


class GpuWorker:
    def __init__(
        self,
        options: argparse.Namespace,
        endpoint: QueueEndpoint,
        allowed: list[str],
        keeper: EmbeddedServerKeeper | None = None,
    ):
        self.keeper = keeper  # set when the queue is the embedded server of allowed[0]
        self.gpu = options.gpus
        self.slots = max(1, options.slots)
        self.queue = options.queue
        self.route = options.route
        self.endpoint = endpoint
        self.allowed = allowed
        self.allowed_configs: list[str] | None = options.allow_config
        self.idle_timeout = options.idle_timeout
        self.poll_max = options.poll_max
        self.heartbeat_s = options.heartbeat
        self.host = socket.gethostname()
        self.worker_id = options.worker_id or f"{self.host}-gpu{self.gpu}-p{os.getpid()}"
        default_log_dir = Path(allowed[0]) / ".snakemake" / "labtasker" / "workers" / self.worker_id
        self.log_dir = Path(options.log_dir or default_log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu
        os.environ[WORKER_ID_ENV] = self.worker_id
        self.server = SharedPolicyServer(
            GuardedPolicyServer(gpu=self.gpu, log_dir=self.log_dir / "policy", slots=self.slots),
            on_change=self.write_status,
        )
        self.breakers = WorkerBreakers(self.worker_id, self.host)  # a policy that never starts costs few starts
        self.stop = threading.Event()
        self.stop_requested_at: float | None = None
        self.lock = threading.Lock()
        self.status_lock = threading.Lock()
        self.busy = 0
        self.last_busy = time.monotonic()
        self.running: dict[str, str] = {}
        self.counts = {
            "succeeded": 0, "adopted": 0, "failed": 0, "handed_back": 0, "refused": 0, "lost": 0, "not_ours": 0
        }  # fmt: skip
        self.counts["node_unfit"] = 0  # handed back: a benchmark whose node checks failed here (node_gate)
        self.foreign: set[str] = set()  # campaigns whose workflow directory is not allowed here
        self.observer: Any = None  # this worker's registration with the queue (queue_client.WorkerRegistration)
        self.gate = NodeGate(self.gpu, log, self._publish_refusals)
        self.check_configs = list(getattr(options, "configfile", None) or [])  # checked at start (--configfile)
        self.warm_steps = not options.cold_job_steps
        self.spares: dict[int, SpareStep] = {}  # slot -> its next job step's pre-imported guardian
        self.steps: dict[int, GuardedProcess] = {}  # slot -> its running job step
        self.last_step_end = 0.0
        self.left_blocked_slots = False

    def client(self) -> Any:
        return self.endpoint.client(self.queue)

    def _recover_server(self) -> bool:
        """The queue did not answer: if it is the embedded server, find or restart it (same socket and database).
        Returns whether the endpoint changed (clients must be rebuilt)."""
        if self.keeper is None or self.stop.is_set():  # stopping starts nothing, a server least of all
            return False
        endpoint = self.keeper.recover()
        changed, self.endpoint = endpoint != self.endpoint, endpoint
        return changed

    # status file ---------------------------------------------------------------------------------------------

    def write_status(self, state: str = "running") -> None:
        with self.status_lock:  # snapshot and write under one lock: a later state is never overwritten by an earlier
            with self.lock:
                status = {
                    "worker_id": self.worker_id,
                    "host": self.host,
                    "pid": os.getpid(),
                    "gpu": self.gpu,
                    "slots": self.slots,
                    "queue": self.queue,
                    "route": self.route,
                    "state": state,
                    # loading (since, timeout, log) / ready or dead (loads, alive) / external / none
                    **self.server.state(),
                    "tasks": dict(self.counts),
                    "running": dict(self.running),
                    WORKER_REFUSING_KEY: self.gate.refusing(),
                    "updated_at": datetime.now(UTC).isoformat(),
                }
                current = next(iter(self.running), None)
            if self.observer is not None:
                self.observer.activity(current)  # busy with a task / idle, for the queue's worker observation
            atomic_write_text(self.log_dir / "status.json", json.dumps(status, indent=2) + "\n")

    # main ----------------------------------------------------------------------------------------------------

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        client = self.client()
        try:
            client.create_queue(self.queue)
            # registered with the queue while it runs: a submitter warns when nothing is claimed and no worker is
            self.observer = queue_client.WorkerRegistration(client, route=self.route, metadata=self._observed_as())
        except Exception as error:
            if getattr(error, "status_code", None) == 401:
                log(
                    f"the Labtasker server {self.endpoint} refused this worker: its token is missing or wrong (set "
                    "LABTASKER_TOKEN to the server's token)"
                )
                return 1
            log(f"cannot reach the Labtasker server {self.endpoint}: {connection_problem(error, str(self.endpoint))}")
            return 1
        finally:
            client.close()
        with contextlib.ExitStack() as registered:
            registered.enter_context(self.observer)
            if self.check_configs:
                self.gate.check_configs(self.check_configs, campaign_key(self.allowed[0]))
            code = self._run_slots()
            if self.left_blocked_slots:  # withdrawing the registration would wait for that server too; it expires
                registered.pop_all()
            return code

    def _publish_refusals(self, refusing: dict[str, dict[str, str]]) -> None:
        try:
            if self.observer is not None:
                self.observer.update(**{WORKER_REFUSING_KEY: refusing})
        except Exception as error:  # the registration is best effort: the refusal stands, the log says it
            log(f"could not show the refusals in this worker's queue registration: {error}")
        self.write_status()

    def _observed_as(self) -> dict[str, Any]:
        return {"worker": self.worker_id, "host": self.host, "pid": os.getpid(), "gpu": self.gpu, "slots": self.slots}

    def _run_slots(self) -> int:
        log(
            f"started: gpu {self.gpu}, {self.slots} slot(s), queue {self.queue}, route {self.route}, server "
            f"{self.endpoint}, allowed {self.allowed}, logs {self.log_dir}"
        )
        self.write_status()
        threads = [
            threading.Thread(target=self._slot_loop, args=(slot,), name=f"slot-{slot}", daemon=True)
            for slot in range(self.slots)
        ]
        for thread in threads:
            thread.start()
        stop_seen_at: float | None = None
        policy_stopped_at = 0.0
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.2)
            if self.stop.is_set():
                if stop_seen_at is None:
                    stop_seen_at = time.monotonic()
                if time.monotonic() - stop_seen_at > 2.0 or not self._steps_running():
                    self.server.server.stop()  # unblock a slot waiting for a policy server to come up
                    policy_stopped_at = policy_stopped_at or time.monotonic()
                if self._leave_blocked_slots(policy_stopped_at):
                    self.left_blocked_slots = True
                    blocked = sum(t.is_alive() for t in threads)
                    log(
                        f"{blocked} slot(s) still waiting for the Labtasker server; stopping without them (their "
                        "tasks come back when their leases expire)"
                    )
                    break
            elif self.idle_timeout > 0:
                with self.lock:
                    idle_for = 0.0 if self.busy else time.monotonic() - self.last_busy
                if idle_for > self.idle_timeout:
                    log(f"idle for {idle_for:.0f}s (--idle-timeout {self.idle_timeout:g}); stopping")
                    self.stop.set()
        self.server.server.stop()
        self.write_status("stopped")
        log(f"stopped: {self.counts}, policy server loads {self.server.server.loads}")
        return 0

    def _leave_blocked_slots(self, policy_stopped_at: float) -> bool:
        """Told to stop by a signal, with no child of this worker still stopping (job steps, the policy server),
        STOP_EXIT_S after the signal and STOP_HAND_BACK_S after the last job step: what the slots still wait for is
        the server."""
        if self.stop_requested_at is None or not policy_stopped_at or self._steps_running():
            return False
        with self.lock:
            last_step_end = self.last_step_end
        now = time.monotonic()
        return now - self.stop_requested_at > STOP_EXIT_S and now - last_step_end > STOP_HAND_BACK_S

    def _steps_running(self) -> bool:
        with self.lock:
            return any(step.poll() is None for step in self.steps.values())

    def _on_signal(self, signum: int, _frame: object) -> None:
        if not self.stop.is_set():
            log(f"{signal.Signals(signum).name}: handing running tasks back and stopping")
            self.stop_requested_at = time.monotonic()
        self.stop.set()

    def _report_deadline(self, started: float) -> float:
        """Reports are retried for minutes through server trouble, but for seconds once the worker is stopping."""
        deadline = started + REPORT_DEADLINE_S
        if self.stop_requested_at is not None:
            deadline = min(deadline, self.stop_requested_at + STOP_REPORT_GRACE_S)
        return deadline

    def _slot_loop(self, slot: int) -> None:
        from labtasker import APIError, LabtaskerError

        client = self.client()
        backoff = 0.2
        foreign_backoff = 0.0
        run_id = _run_id()
        self._prepare_spare(slot, self.allowed[0])
        try:
            while not self.stop.is_set():
                try:
                    loaded = self.server.server.spec  # its batches first (policy affinity)
                    claim = queue_client.claim_preferring(
                        client, route=self.route, run_id=run_id, loaded=loaded.identity if loaded else None
                    )
                except APIError as error:
                    if error.code in ("stale_run", "run_finalized", "run_id_conflict"):
                        run_id = _run_id()
                        continue
                    log(f"slot {slot}: claim refused: {error.code}: {error.message}")
                    self.stop.wait(min(self.poll_max, 5.0))
                    continue
                except LabtaskerError as error:
                    log(f"slot {slot}: claim failed (server unreachable?): {error}")
                    if self._recover_server():
                        client.close()
                        client = self.client()
                    self.stop.wait(min(self.poll_max, 5.0))
                    continue  # same run_id: a claim that went through server-side is returned again
                run_id = _run_id()
                if claim is None:
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, self.poll_max)
                    continue
                backoff = 0.2
                campaign = payload_campaign(claim.task.args)
                if campaign is not None and campaign in self.foreign:
                    self._hand_back_foreign(client, claim, slot, campaign, None)
                    foreign_backoff = min(max(2 * foreign_backoff, FOREIGN_BACKOFF_S[0]), FOREIGN_BACKOFF_S[1])
                    self.stop.wait(foreign_backoff)
                    continue
                foreign_backoff = 0.0
                with self.lock:
                    self.busy += 1
                worked = True
                try:
                    worked = self._execute(client, claim, slot)
                except Exception as error:  # never lose the slot to a bug; the lease expiry recovers the task
                    log(f"slot {slot}: internal error on task {claim.task.id}: {type(error).__name__}: {error}")
                    message = f"{type(error).__name__}: {error}"
                    self._report(client, claim, "fail", error_type="WorkerError", message=message)
                finally:
                    with self.lock:
                        self.busy -= 1
                        if worked:  # a task handed back as not ours is no work: --idle-timeout keeps counting
                            self.last_busy = time.monotonic()
                        self.running.pop(claim.task.id, None)
                    self.write_status()
                if not worked:
                    self.stop.wait(FOREIGN_BACKOFF_S[0])
        finally:
            client.close()
            spare = self.spares.pop(slot, None)
            if spare is not None:
                spare.discard()

    # one task ------------------------------------------------------------------------------------------------

    def _hand_back_foreign(self, client: Any, claim: Any, slot: int, campaign: str | None, reason: str | None) -> None:
        """Not for this worker: back to the queue uncharged (unclaim), and this campaign is not claimed again."""
        if campaign is not None and campaign not in self.foreign:
            self.foreign.add(campaign)
            log(f"slot {slot}: campaign {campaign} is not served by this worker: its tasks are handed back from now on")
        why = reason or f"campaign {campaign} is not served by this worker"
        log(f"slot {slot}: handing task {claim.task.id} back uncharged: {why}")
        self._count("not_ours")
        self._report(client, claim, "unclaim")

    def _execute(self, client: Any, claim: Any, slot: int) -> bool:
        """Run one claimed task; False when it was not for this worker (handed back uncharged)."""
        task = claim.task
        started = time.monotonic()
        log(f"slot {slot}: claimed task {task.id} {task.name or ''} (attempt {task.attempt}/{task.max_attempts})")
        try:
            step = validate_task(task.args, self.allowed, self.allowed_configs)
        except NotForThisWorker as error:
            self._hand_back_foreign(client, claim, slot, error.campaign, str(error))
            return False
        except TaskRefused as error:
            log(f"slot {slot}: refusing task {task.id} (failed with the reason; every worker refuses it): {error}")
            self._count("refused")
            self._report(client, claim, "fail", error_type="TaskRefused", message=f"worker {self.worker_id}: {error}")
            return True
        if self._adopt_lost_run(client, claim, slot, step):
            return True
        unfit = self.gate.refusal(task.args, list(step.configfiles), step.campaign)
        if unfit is not None:  # never run, never charged: a worker whose node can run it takes it
            log(f"slot {slot}: handing task {task.id} back uncharged: {unfit}")
            self._count("node_unfit")
            self._report(client, claim, "unclaim")
            self.stop.wait(self.gate.backoff_s())
            return False
        with self.lock:
            self.running[task.id] = task.name or ""
        self.write_status()
        log_path = Path(step.workdir) / ".snakemake" / "labtasker" / "tasks" / task.id / f"{claim.run_id}.log"
        revoked = threading.Event()
        heartbeat = threading.Thread(target=self._heartbeat, args=(claim, revoked), daemon=True)
        heartbeat.start()
        try:
            if step.policy is not None:
                try:
                    self.breakers.check(step)
                    guard = self.breakers.start_guard(step, self.stop)
                    with self.server.lease(step.policy, self.stop, guard) as endpoint:
                        self.write_status()
                        env = self._job_env(task.id, endpoint, step.policy.identity)
                        outcome = self._start_step(client, claim, slot, step, env, log_path, revoked)
                except Stopping:
                    outcome = "stopped"
                except PolicyServerError as error:
                    if self.stop.is_set():
                        outcome = "stopped"
                    else:
                        log(f"slot {slot}: policy server for task {task.id} failed: {error}")
                        self._count("failed")
                        self._report(
                            client,
                            claim,
                            "fail",
                            error_type=getattr(error, "error_type", "PolicyServerError"),
                            message=f"worker {self.worker_id} (gpu {self.gpu}): {error}",
                        )
                        return True
            else:
                env = self._job_env(task.id, None, None)
                outcome = self._start_step(client, claim, slot, step, env, log_path, revoked)
        finally:
            revoked.set()  # also stops the heartbeat thread
            heartbeat.join(5)
        where = f"{self.host}:{log_path}"
        duration = round(time.monotonic() - started, 3)
        if outcome == "stopped":
            if self._report(client, claim, "unclaim"):
                log(f"slot {slot}: handed task {task.id} back (uncharged)")
                self._count("handed_back")
            else:
                log(f"slot {slot}: could not hand task {task.id} back; it comes back when its lease expires")
        elif outcome == "revoked":
            log(f"slot {slot}: task {task.id} was cancelled or its lease expired; job step killed")
            self._count("lost")
        elif outcome == 0:
            missing = [p for p in step.outputs if not os.path.exists(p)]
            if missing:
                self._count("failed")
                message = (
                    f"the job step exited 0 on {self.worker_id} but did not produce {missing} (did the submitting "
                    f"snakemake exit? a job step started after its submitter exited does nothing); log {where}"
                )
                log(f"slot {slot}: task {task.id}: {message}")
                self._report(client, claim, "fail", error_type="MissingOutputs", message=message)
            else:
                self._count("succeeded")
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
                self._report(client, claim, "complete", result=result)
        else:
            self._count("failed")
            cause = read_cause(_cause_path(log_path))
            self.breakers.batch_done(step, task.id, ok=False, log_path=log_path, cause=cause)
            exited = f"job step exited with status {outcome} on {self.worker_id} (gpu {self.gpu})"
            if cause is None:  # it failed before its job body could say why (a Snakemake error): the log's end
                message = failure_text(f"JobStepFailed: {exited}", where, _tail(log_path))
            else:
                message = failure_text(cause, where, exited)
            log(f"slot {slot}: task {task.id} failed (exit {outcome}): {cause or 'no cause recorded'}; log {log_path}")
            self._report(client, claim, "fail", error_type="JobStepFailed", message=message)
        return True

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
        self._count("adopted")
        self._report(client, claim, "complete", result={**result, "adopted_run": run_id, "adopted_by": self.worker_id})
        return True

    def _job_env(self, task_id: str, endpoint: str | None, identity: str | None) -> dict[str, str]:
        from evalwf.contract.loopback import with_loopback_no_proxy

        env = dict(with_loopback_no_proxy(dict(os.environ)))
        env["CUDA_VISIBLE_DEVICES"] = self.gpu
        env[WORKER_ID_ENV] = self.worker_id
        env[TASK_ID_ENV] = task_id
        for key in ("LABTASKER_TOKEN", "LABTASKER_RUN_ID"):
            env.pop(key, None)
        env.update(cpu_render_threads(env, self.slots * int(os.environ.get(LOCAL_WORKERS_ENV, "1"))))
        if endpoint is not None and identity is not None:
            env[ENDPOINT_ENV] = endpoint
            env[IDENTITY_ENV] = identity
        else:
            env.pop(ENDPOINT_ENV, None)
            env.pop(IDENTITY_ENV, None)
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
        """Tell the queue the job step starts now (a submitter's Ctrl-C cancels claimed tasks whose step has not
        started: such a step would only wait for the submitter's removed files and fail), after checking that the
        task was not cancelled meanwhile (e.g. while the policy server was loading); then run it."""
        from labtasker import APIError, LabtaskerError

        try:
            queue_client.heartbeat(client, claim)
            queue_client.report_progress(
                client, claim, {JOB_STEP_PROGRESS: "started", "worker": self.worker_id, "log": str(log_path)}
            )
        except APIError as error:
            if error.code in ("stale_run", "run_finalized"):
                log(f"task {claim.task.id} was cancelled before its job step started ({error.code})")
                return "revoked"
        except LabtaskerError as error:
            log(f"task {claim.task.id}: could not report the job step start: {error}")
        return self._run_step(slot, step, env, log_path, revoked)

    def _prepare_spare(self, slot: int, workdir: str, preload_after_s: float = 0.0) -> None:
        """Start the slot's next job-step guardian, which imports Snakemake before the slot's next task arrives."""
        if not self.warm_steps or self.stop.is_set() or slot in self.spares:
            return
        try:
            self.spares[slot] = SpareStep(cwd=workdir, grace_s=STEP_GRACE_S, preload_after_s=preload_after_s)
        except OSError as error:
            log(f"slot {slot}: no warm job step ({error}); job steps start cold")

    def _launch(self, slot: int, step: JobStep, env: dict[str, str], log_path: Path) -> GuardedProcess:
        """The job step under a guardian: the slot's spare (Snakemake already imported) when it has one. The next
        task's spare is started here too, importing while this step runs (after this step's own start-up)."""
        process = self._launch_from_spare(slot, step, env, log_path) or GuardedProcess(
            step.argv, env=env, cwd=step.workdir, log_path=log_path, grace_s=STEP_GRACE_S
        )
        self._prepare_spare(slot, step.workdir, preload_after_s=SPARE_PRELOAD_AFTER_S)
        return process

    def _launch_from_spare(
        self, slot: int, step: JobStep, env: dict[str, str], log_path: Path
    ) -> GuardedProcess | None:
        spare = self.spares.pop(slot, None)
        if spare is None:
            return None
        if spare.alive() and step.argv[:3] == [sys.executable, "-m", "snakemake"]:
            try:
                process = spare.start(step.argv[3:], env, step.workdir, log_path)
                return GuardedProcess.adopt(process, step.argv, log_path)
            except OSError as error:
                log(f"slot {slot}: warm job step unavailable ({error}); starting it cold")
        spare.discard()
        return None

    def _run_step(
        self, slot: int, step: JobStep, env: dict[str, str], log_path: Path, revoked: threading.Event
    ) -> int | str:
        if self.stop.is_set():
            return "stopped"
        env = {**env, CAUSE_FILE_ENV: str(_cause_path(log_path))}  # where its job body says why it failed
        process = self._launch(slot, step, env, log_path)
        with self.lock:
            self.steps[slot] = process
        try:
            while True:
                code = process.poll()
                if code is not None:
                    # a Ctrl-C reaches the job step's guardian too (same process group): a step that ended while the
                    # worker is stopping is handed back, never charged as a failure
                    return "stopped" if self.stop.is_set() and code != 0 else code
                if self.stop.is_set():
                    process.stop()
                    return "stopped"
                if revoked.is_set():
                    process.stop()
                    return "revoked"
                time.sleep(0.1)
        finally:
            with self.lock:
                self.steps.pop(slot, None)
                self.last_step_end = time.monotonic()

    def _heartbeat(self, claim: Any, revoked: threading.Event) -> None:
        from labtasker import APIError, LabtaskerError

        client = self.client()
        try:
            while not revoked.wait(self.heartbeat_s):
                try:
                    queue_client.heartbeat(client, claim)
                except APIError as error:
                    if error.code in ("stale_run", "run_finalized"):
                        log(f"task {claim.task.id}: heartbeat rejected ({error.code}: {error.details}); stopping it")
                        revoked.set()
                        return
                    log(f"task {claim.task.id}: heartbeat error {error.code}: {error.message}")
                except LabtaskerError as error:
                    log(f"task {claim.task.id}: heartbeat transport error: {error}")
                    self._recover_server()
        finally:
            client.close()

    def _report(self, client: Any, claim: Any, action: str, **kwargs: Any) -> bool:
        """complete / fail / unclaim, retried through transient server trouble."""
        from labtasker import APIError, LabtaskerError

        started = time.monotonic()
        delay = 0.25
        while True:
            try:
                if action == "complete":
                    queue_client.complete(client, claim, kwargs["result"])
                elif action == "fail":
                    queue_client.fail(client, claim, kwargs["error_type"], kwargs["message"])
                else:
                    queue_client.unclaim(client, claim)
                return True
            except APIError as error:
                if error.code in ("stale_run", "run_finalized"):
                    log(f"task {claim.task.id}: {action} not accepted ({error.code}); the task moved on")
                    return False
                if error.status_code < 500 and error.code != "database_busy":
                    log(f"task {claim.task.id}: {action} rejected: {error.code}: {error.message}")
                    return False
            except LabtaskerError as error:
                log(f"task {claim.task.id}: {action} transport error: {error}")
                self._recover_server()  # the embedded server keeps its socket: this client reconnects as it is
            remaining = self._report_deadline(started) - time.monotonic()
            if remaining <= 0:
                log(f"task {claim.task.id}: giving up reporting {action}; the lease expiry will recover it")
                return False
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 5.0)

    def _count(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1


def cpu_render_threads(env: dict[str, str], parallel_jobs: int) -> dict[str, str]:
    """Without an NVIDIA driver, simulators render on llvmpipe, which by default starts one thread per core in
    every job: split the cores between the job slots of this machine instead (measured ~1.7x throughput for two
    LIBERO envs on 2 cores with one thread each). Explicit settings win."""
    if "LP_NUM_THREADS" in env or os.path.exists("/proc/driver/nvidia"):
        return {}
    return {"LP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, parallel_jobs)))}


def _run_id() -> str:
    return f"r_{secrets.token_urlsafe(9)}"


def _cause_path(log_path: Path) -> Path:
    return log_path.with_suffix(".cause.json")


def _tail(path: Path, max_chars: int = 3000) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_chars))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
