"""One GPU worker process: registers with the queue, runs its slots' claim loops until it is told to stop (a signal,
--idle-timeout), and stops promptly. Each claimed task is run by evalwf/worker/task_run.py, reported by
evalwf/worker/reporting.py, and shown in the worker's status file (evalwf/worker/status_file.py).

See evalwf/worker/main.py for what a worker does and its command line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from evalwf.contract import CLIENT_TOKEN_ENV, WORKER_ID_ENV, campaign_key
from evalwf.contract.task_payload import payload_campaign
from evalwf.queue.embedded_server import EmbeddedServerKeeper
from evalwf.queue.endpoint import QueueEndpoint
from evalwf.queue.tls import connection_problem, tls_problem
from evalwf.worker import queue_client
from evalwf.worker.job_steps import JobSteps
from evalwf.worker.log import log
from evalwf.worker.node_gate import NodeGate
from evalwf.worker.policy_breaker import WorkerBreakers
from evalwf.worker.policy_prestart import policy_to_prestart, prestart_policy_server
from evalwf.worker.policy_server import GuardedPolicyServer
from evalwf.worker.reporting import QueueReports
from evalwf.worker.server_waits import ServerWaits
from evalwf.worker.shared_server import SharedPolicyServer
from evalwf.worker.status_file import WorkerStatus
from evalwf.worker.task_run import TaskRun

# Once told to stop by a signal, the worker exits this long after the signal, once its job steps have ended, whether
# or not every slot has heard back from the server: a request to a hung server would block a slot for the client's
# 15 s timeout. A task whose hand-back did not get through comes back when its lease expires.
STOP_EXIT_S = 2.0
# ... and only a slot whose request has waited this long for the server (a healthy one answers within it, also on a
# loaded machine); a slot busy with its own work (stopping its job step, handing its task back) is waited for
STOP_HAND_BACK_S = 1.5
# Labtasker's claim has no filter: a task of a campaign this worker does not serve is handed back at once, and the
# slot then waits this long (doubling up to the maximum) before claiming again, so that workers allowed there get it.
FOREIGN_BACKOFF_S = (1.0, 10.0)
QUEUE_GONE_EXIT = 3  # exit status of a worker that stopped because its queue was deleted


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
        self.idle_timeout = options.idle_timeout
        self.poll_max = options.poll_max
        self.host = socket.gethostname()
        self.worker_id = options.worker_id or f"{self.host}-gpu{self.gpu}-p{os.getpid()}"
        default_log_dir = Path(allowed[0]) / ".snakemake" / "labtasker" / "workers" / self.worker_id
        self.log_dir = Path(options.log_dir or default_log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu
        os.environ[WORKER_ID_ENV] = self.worker_id
        self.server = SharedPolicyServer(
            GuardedPolicyServer(gpu=self.gpu, log_dir=self.log_dir / "policy", slots=self.slots),
            on_change=lambda: self.status.write(),
        )
        self.gate = NodeGate(self.gpu, log, self._publish_refusals)
        self.status = WorkerStatus(
            self.log_dir / "status.json",
            {"worker_id": self.worker_id, "host": self.host, "pid": os.getpid(),
             "started_at": psutil.Process().create_time(), "gpu": self.gpu, "slots": self.slots, "queue": self.queue,
             "route": self.route},
            server_state=self.server.state,
            refusing=self.gate.refusing,
        )  # fmt: skip
        self.stop = threading.Event()
        self.stop_requested_at: float | None = None
        self.lock = threading.Lock()
        self.busy = 0
        self.last_busy = time.monotonic()
        self.check_configs = list(getattr(options, "configfile", None) or [])  # checked at start (--configfile)
        self.steps = JobSteps(self.stop, warm=not options.cold_job_steps)
        self.waits = ServerWaits()  # the slots' requests to the server, timed
        self.reports = QueueReports(self.client, self._recover_server, lambda: self.stop_requested_at)
        self.tasks = TaskRun(
            worker_id=self.worker_id,
            gpu=self.gpu,
            slots=self.slots,
            allowed=allowed,
            allowed_configs=options.allow_config,
            heartbeat_s=options.heartbeat,
            stop=self.stop,
            server=self.server,
            breakers=WorkerBreakers(self.worker_id, self.host),  # a policy that never starts costs few starts
            gate=self.gate,
            status=self.status,
            reports=self.reports,
            steps=self.steps,
        )
        self.observer: Any = None  # this worker's registration with the queue (queue_client.WorkerRegistration)
        self.left_blocked_slots = False
        self.queue_gone = False  # its queue was deleted under it: it stopped (exit status QUEUE_GONE_EXIT)

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

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        client = self.client()
        try:
            client.create_queue(self.queue)
            # registered with the queue while it runs: a submitter warns when nothing is claimed and no worker is
            self.observer = queue_client.WorkerRegistration(client, route=self.route, metadata=self._observed_as())
            self.status.observer = self.observer
        except Exception as error:
            if getattr(error, "status_code", None) == 401:
                log(
                    f"the Labtasker server {self.endpoint} refused this worker: its token is missing or wrong (set "
                    f"{CLIENT_TOKEN_ENV} to the server's token)"
                )
                return 1
            log(f"cannot reach the Labtasker server {self.endpoint}: {connection_problem(error, str(self.endpoint))}")
            return 1
        finally:
            client.close()
        with contextlib.ExitStack() as registered:
            registered.enter_context(self.observer)
            if self.check_configs:
                self._warm_up(self.check_configs)
            code = self._run_slots()
            if self.left_blocked_slots:  # withdrawing the registration would wait for that server too; it expires
                registered.pop_all()
            return code

    def _warm_up(self, configfiles: list[str]) -> None:
        """--configfile: the node checked for their benchmarks now, and their policy's server started beside the
        slots' first claims (evalwf/worker/policy_prestart.py), unless no benchmark of theirs can run here."""
        runnable = self.gate.check_configs(configfiles, campaign_key(self.allowed[0]))
        spec, message = policy_to_prestart(configfiles)
        if spec is not None and not runnable:
            spec, message = None, "no policy server started at start: no benchmark of the config files runs here"
        log(message)
        if spec is not None:
            prestart_policy_server(self.server, spec, self.stop, log)

    def _publish_refusals(self, refusing: dict[str, dict[str, str]]) -> None:
        try:
            if self.observer is not None:
                self.observer.update(refusing)
        except Exception as error:  # the registration is best effort: the refusal stands, the log says it
            log(f"could not show the refusals in this worker's queue registration: {error}")
        self.status.write()

    def _observed_as(self) -> queue_client.WorkerObservation:
        return {"worker": self.worker_id, "host": self.host, "pid": os.getpid(), "gpu": self.gpu, "slots": self.slots}

    def _run_slots(self) -> int:
        log(
            f"started: gpu {self.gpu}, {self.slots} slot(s), queue {self.queue}, route {self.route}, server "
            f"{self.endpoint}, allowed {self.allowed}, logs {self.log_dir}"
        )
        self.status.write()
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
                if time.monotonic() - stop_seen_at > 2.0 or not self.steps.running():
                    self.server.server.stop()  # unblock a slot waiting for a policy server to come up
                    policy_stopped_at = policy_stopped_at or time.monotonic()
                if self._leave_blocked_slots(policy_stopped_at, [t for t in threads if t.is_alive()]):
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
        self.steps.discard_all()  # the spares of slots left waiting for the server, and those still being stopped
        self.status.write("stopped")
        log(f"stopped: {self.status.counts}, policy server loads {self.server.server.loads}")
        return QUEUE_GONE_EXIT if self.queue_gone else 0

    def _leave_blocked_slots(self, policy_stopped_at: float, slots: list[threading.Thread]) -> bool:
        """Told to stop by a signal, with no child of this worker still stopping (job steps, spares, the policy
        server), STOP_EXIT_S after the signal, and every slot still running waiting for the server's reply for
        STOP_HAND_BACK_S: the server hangs, and its tasks come back when their leases expire. No slot still running
        (the last one ended meanwhile): none is left."""
        if self.stop_requested_at is None or not policy_stopped_at or self.steps.stopping() or not slots:
            return False
        if time.monotonic() - self.stop_requested_at <= STOP_EXIT_S:
            return False
        return all(self.waits.waiting_for(slot) > STOP_HAND_BACK_S for slot in slots)

    def _queue_gone(self) -> None:
        """The queue was deleted under this worker (`make clean FORCE=1` removed the embedded server's database, or
        someone deleted it on a shared server): nothing will ever be claimed from it again, so the worker says so once
        and stops (exit status 3) instead of asking every few seconds forever."""
        with self.lock:
            if self.queue_gone:
                return
            self.queue_gone = True
        log(
            f"queue {self.queue} no longer exists on the Labtasker server {self.endpoint} (deleted, e.g. by `make "
            "clean`): stopping; start a worker again once a submission has created the queue again"
        )
        self.stop.set()

    def _on_signal(self, signum: int, _frame: object) -> None:
        if not self.stop.is_set():
            log(f"{signal.Signals(signum).name}: handing running tasks back and stopping")
            self.stop_requested_at = time.monotonic()
        self.stop.set()

    def _slot_loop(self, slot: int) -> None:
        from labtasker import APIError, LabtaskerError

        client = self.waits.track(self.client())
        backoff = 0.2
        foreign_backoff = 0.0
        run_id = _run_id()
        self.steps.prepare_spare(slot, self.allowed[0])
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
                    if error.code == "queue_not_found":
                        self._queue_gone()
                        break
                    log(f"slot {slot}: claim refused: {error.code}: {error.message}")
                    self.stop.wait(min(self.poll_max, 5.0))
                    continue
                except LabtaskerError as error:  # it connected at start: a refused certificate is a changed one
                    tls = tls_problem(error, str(self.endpoint), connected_before=True)
                    log(
                        f"slot {slot}: claim failed: {tls}"
                        if tls
                        else f"slot {slot}: claim failed (server unreachable?): {error}"
                    )
                    if self._recover_server():
                        client.close()
                        client = self.waits.track(self.client())
                    self.stop.wait(min(self.poll_max, 5.0))
                    continue  # same run_id: a claim that went through server-side is returned again
                run_id = _run_id()
                if claim is None:
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, self.poll_max)
                    continue
                backoff = 0.2
                campaign = payload_campaign(claim.task.args)
                if campaign is not None and campaign in self.tasks.foreign:
                    self.tasks.hand_back_foreign(client, claim, slot, campaign, None)
                    foreign_backoff = min(max(2 * foreign_backoff, FOREIGN_BACKOFF_S[0]), FOREIGN_BACKOFF_S[1])
                    self.stop.wait(foreign_backoff)
                    continue
                foreign_backoff = 0.0
                with self.lock:
                    self.busy += 1
                worked = True
                try:
                    worked = self.tasks.execute(client, claim, slot)
                except Exception as error:  # never lose the slot to a bug; the lease expiry recovers the task
                    log(f"slot {slot}: internal error on task {claim.task.id}: {type(error).__name__}: {error}")
                    message = f"{type(error).__name__}: {error}"
                    self.reports.report(client, claim, "fail", error_type="WorkerError", message=message)
                finally:
                    with self.lock:
                        self.busy -= 1
                        if worked:  # a task handed back as not ours is no work: --idle-timeout keeps counting
                            self.last_busy = time.monotonic()
                    self.status.ended(claim.task.id)
                    self.status.write()
                if not worked:
                    self.stop.wait(FOREIGN_BACKOFF_S[0])
        finally:
            client.close()
            self.steps.discard_spare(slot)


def _run_id() -> str:
    return f"r_{secrets.token_urlsafe(9)}"
