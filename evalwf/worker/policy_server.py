"""A guarded policy server: started from the policy spec, proven ready, reused while the identity holds,
restarted when it changes or the server dies, killed with its owner."""

from __future__ import annotations

import os
import time
from pathlib import Path

from evalwf.contract.loopback import free_port, with_loopback_no_proxy
from evalwf.contract.policy_identity import serving_refusal
from evalwf.policy.client import PolicyClient, PolicyServerError
from evalwf.policy.peer import process_identity
from evalwf.policy.serving import MAX_BATCH_ENV, MAX_WAIT_MS_ENV
from evalwf.policy.spec import EXTERNAL_ENDPOINT, PolicySpec
from evalwf.worker.processes import GuardedProcess
from evalwf.worker.procfs import descendants, listening_pids


class GuardedPolicyServer:
    """One policy server owned by one worker (or one local batch)."""

    def __init__(self, gpu: str = "", log_dir: str | os.PathLike[str] = ".", host: str = "127.0.0.1", slots: int = 1):
        self.gpu = gpu
        self.host = host
        self.slots = slots  # job slots sharing this server: its batch size unless the policy sets max_batch
        self.log_dir = Path(log_dir)
        self.spec: PolicySpec | None = None
        self.port: int | None = None
        self.process: GuardedProcess | None = None
        # `pid:start time` of the process started (evalwf.policy.peer): each client verifies that it answers
        self.process_identity: str | None = None
        self.loads = 0  # how many times a server was started: reuse keeps this at 1

    @property
    def endpoint(self) -> str:
        if self.spec is not None and self.spec.external:
            return EXTERNAL_ENDPOINT
        if self.port is None:
            raise PolicyServerError("policy server not started")
        return f"ws://{self.host}:{self.port}"

    def alive(self) -> bool:
        if self.spec is not None and self.spec.external:
            return True  # nothing of ours to keep alive: each batch checks the external server itself
        return self.process is not None and self.process.poll() is None

    def ensure(self, spec: PolicySpec) -> str:
        """Return the endpoint of a ready server for `spec`, starting or restarting it only when needed.

        An external policy (policy.url) starts nothing: the endpoint is EXTERNAL_ENDPOINT, which tells the job
        step to use the config's URL (and check it with a handshake before its batch)."""
        if spec.external:
            self.stop()
            self.spec = spec
            return self.endpoint
        served = self.spec.identity if self.spec is not None else None
        if self.alive() and serving_refusal(served, spec.identity) is None:
            return self.endpoint
        self.stop()
        self.start(spec)
        return self.endpoint

    def log_path(self, spec: PolicySpec, load: int) -> Path:
        """The log of the `load`-th server started (the next one: `self.loads + 1`)."""
        return self.log_dir / f"policy-server-{spec.name}-{load}.log"

    def start(self, spec: PolicySpec) -> None:
        self.spec = spec
        self.port = free_port(self.host)
        if listening_pids(self.port):
            raise PolicyServerError(f"port {self.port} is already taken")
        env = dict(with_loopback_no_proxy(dict(os.environ)))
        env[MAX_BATCH_ENV] = str(spec.batch_limit(self.slots))
        env[MAX_WAIT_MS_ENV] = f"{spec.max_wait_ms:g}"
        env.update(spec.env)
        if self.gpu != "":
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        self.loads += 1
        log_path = self.log_path(spec, self.loads)
        command = spec.render_command(port=self.port, gpu=self.gpu or "0", slots=self.slots)
        self.process = GuardedProcess(["/bin/sh", "-c", command], env=env, log_path=log_path)
        try:
            self.process_identity = process_identity(self.process.pid)
            self._wait_ready(spec.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        """Ready = our process tree holds the listening socket AND answers the openpi handshake."""
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise PolicyServerError(
                    f"policy server exited with status {self.process.poll()} during startup; "
                    f"log {self.process.log_path}:\n{self.process.log_tail()}"
                )
            owners = listening_pids(self.port)
            if owners:
                ours = descendants(self.process.pid)
                if not owners <= ours:
                    raise PolicyServerError(
                        f"port {self.port} is held by process(es) {sorted(owners - ours)} that this worker did not "
                        "start (a stale server?); refusing to use it"
                    )
                try:
                    PolicyClient(self.endpoint, connect_timeout_s=5.0, server_process=self.process_identity).close()
                    return
                except PolicyServerError:
                    pass
            if time.monotonic() > deadline:
                raise PolicyServerError(
                    f"policy server not ready after {timeout_s:.0f}s (policy.startup_timeout_s); "
                    f"log {self.process.log_path}:\n{self.process.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
        self.process = None
        self.process_identity = None

    def __enter__(self) -> GuardedPolicyServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
