"""The job steps of a worker's slots: each runs under a guardian (evalwf/worker/guardian.py), started from the slot's
spare when it has one (a guardian that imported Snakemake while the slot was idle: evalwf/worker/warm_step.py), and
is stopped when the worker stops or its task is revoked. Spares are forked from the worker's one fork server
(evalwf/worker/fork_server.py), which imported Snakemake once; while it is gone they start as fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from evalwf.worker.fork_server import STALE_EXIT, ForkedSpare, ForkServer
from evalwf.worker.job_payload import JobStep
from evalwf.worker.log import log
from evalwf.worker.processes import GuardedProcess
from evalwf.worker.warm_step import SpareStep

# A cold job step (a fresh `python -m snakemake`) imports Snakemake for about a second: the next spare imports after
# that, not competing with it for the CPU. A warm step (started from a spare) has imported already and goes straight to
# its own work, so the next spare imports at once and is ready when that step ends, however short its batch.
COLD_STEP_STARTUP_S = 2.0
STEP_GRACE_S = 10.0  # a stopped job step's group gets SIGTERM, then this long before SIGKILL


def cause_path(log_path: Path) -> Path:
    """Where the job body of the step logging to `log_path` writes why it failed (evalwf.contract.failure)."""
    return log_path.with_suffix(".cause.json")


class JobSteps:
    def __init__(self, stop: threading.Event, *, warm: bool, forked: bool = True):
        self.stop = stop
        self.warm = warm  # start steps from spares (else every step is a fresh `python -m snakemake`)
        self.forked = forked  # spares forked from the fork server (else each is a fresh interpreter)
        self.spares: dict[int, SpareStep | ForkedSpare] = {}  # slot -> its next job step's pre-imported guardian
        self.fork_server: ForkServer | None = None  # started with the first spare
        self.fork_server_lost = False  # it died (not stale): spares start as fresh interpreters from then on
        self.retired: list[ForkServer] = []  # fork servers whose imports went stale, still reaping their spares
        self.steps: dict[int, GuardedProcess] = {}  # slot -> its running job step
        self.discarding = 0  # spares being stopped right now (each takes up to a few seconds to exit)
        self.lock = threading.Lock()

    def prepare_spare(self, slot: int, workdir: str, preload_after_s: float = 0.0) -> None:
        """Start the slot's next job-step guardian, which imports Snakemake before the slot's next task arrives."""
        with self.lock:
            if not self.warm or self.stop.is_set() or slot in self.spares:
                return
            try:
                forked = self._forked_spare(workdir)
                self.spares[slot] = forked or SpareStep(
                    cwd=workdir, grace_s=STEP_GRACE_S, preload_after_s=preload_after_s
                )
            except OSError as error:
                log(f"slot {slot}: no warm job step ({error}); job steps start cold")

    def _forked_spare(self, workdir: str) -> ForkedSpare | None:
        """A spare from the fork server (started now if there is none, or anew when it retired because its imports
        went stale), or None once it died otherwise (the caller starts a fresh interpreter). (The caller holds the
        lock.)"""
        if not self.forked or self.fork_server_lost:
            return None
        server = self.fork_server
        spare = server.spare() if server is not None else None
        if spare is not None:
            return spare
        if server is not None:
            if not server.alive() and server.process.returncode != STALE_EXIT:
                code = server.process.returncode
                log(f"the job-step fork server exited ({code}); spares start as fresh interpreters from now on")
                self.fork_server_lost = True
                server.stop(timeout_s=1.0)
                return None
            self.retired.append(server)  # it reaps its running spares, then exits
        self.retired = [old for old in self.retired if old.alive() or old.stop(timeout_s=1.0) is None]
        self.fork_server = ForkServer(cwd=workdir, grace_s=STEP_GRACE_S)
        return self.fork_server.spare()

    def discard_spare(self, slot: int) -> None:
        with self.lock:
            spare = self.spares.pop(slot, None)
        self._discard(spare)

    def discard_all(self) -> None:
        """Stop and reap every spare still waiting (the worker exits next): one left behind would outlive the worker
        and, exiting, stay a zombie wherever PID 1 does not reap."""
        with self.lock:
            spares, self.spares = list(self.spares.values()), {}
        for spare in spares:
            self._discard(spare)
        while self.stopping():
            time.sleep(0.05)
        with self.lock:
            servers, self.fork_server, self.retired = [self.fork_server, *self.retired], None, []
        for server in servers:
            if server is not None:
                server.stop()

    def _discard(self, spare: SpareStep | ForkedSpare | None) -> None:
        if spare is None:
            return
        with self.lock:
            self.discarding += 1
        try:
            spare.discard()
        finally:
            with self.lock:
                self.discarding -= 1

    def running(self) -> bool:
        with self.lock:
            return self._a_step_runs()

    def stopping(self) -> bool:
        """A job step still runs or a spare is still being stopped: a process of ours the worker must wait for."""
        with self.lock:
            return self.discarding > 0 or self._a_step_runs()

    def _a_step_runs(self) -> bool:
        """(The caller holds the lock.)"""
        return any(step.poll() is None for step in self.steps.values())

    def run(self, slot: int, step: JobStep, env: dict[str, str], log_path: Path, revoked: threading.Event) -> int | str:
        """The step's exit status, or "stopped" (the worker stops) or "revoked" (its task is no longer ours)."""
        if self.stop.is_set():
            return "stopped"
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
                try:  # wakes when the step ends (a forked spare's status pipe), not up to 0.1 s later
                    process.wait(0.1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            with self.lock:
                self.steps.pop(slot, None)

    def _launch(self, slot: int, step: JobStep, env: dict[str, str], log_path: Path) -> GuardedProcess:
        """The job step under a guardian: the slot's spare (Snakemake already imported) when it has one. The next
        task's spare is started here too, importing while this step runs: at once after a warm start, after the
        start-up of a cold one (COLD_STEP_STARTUP_S)."""
        warm = self._launch_from_spare(slot, step, env, log_path)
        process = warm or GuardedProcess(step.argv, env=env, cwd=step.workdir, log_path=log_path, grace_s=STEP_GRACE_S)
        self._learn_snakefile(step)
        self.prepare_spare(slot, step.workdir, preload_after_s=0.0 if warm else COLD_STEP_STARTUP_S)
        return process

    def _learn_snakefile(self, step: JobStep) -> None:
        """The fork server parses this step's Snakefile before it forks the next spare (worker/fork_server.py)."""
        with self.lock:
            server = self.fork_server
        if server is not None and "--snakefile" in step.argv[:-1]:
            server.learn(step.argv[step.argv.index("--snakefile") + 1])

    def _launch_from_spare(
        self, slot: int, step: JobStep, env: dict[str, str], log_path: Path
    ) -> GuardedProcess | None:
        with self.lock:
            spare = self.spares.pop(slot, None)
        if spare is None:
            return None
        if spare.alive() and step.argv[:3] == [sys.executable, "-m", "snakemake"]:
            try:
                process = spare.start(step.argv[3:], env, step.workdir, log_path)
                return GuardedProcess.adopt(process, step.argv, log_path)
            except OSError as error:
                log(f"slot {slot}: warm job step unavailable ({error}); starting it cold")
        self._discard(spare)
        return None
