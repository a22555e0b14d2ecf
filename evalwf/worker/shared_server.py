"""The policy server shared by the job slots of one GPU worker, and its state for status.json."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from evalwf.contract.job_step_context import JobStepContext
from evalwf.contract.policy_identity import serving_refusal
from evalwf.policy.spec import EXTERNAL_ENDPOINT, PolicySpec
from evalwf.worker.log import log
from evalwf.worker.policy_server import GuardedPolicyServer


class _ServerLoadingDetails(TypedDict, total=False):
    policy_server_loading_since: str  # ISO time
    policy_server_timeout_s: float
    policy_server_log: str


class ServerLoading(_ServerLoadingDetails):
    policy_identity: str


class ServerState(_ServerLoadingDetails, total=False):
    """What status.json says of the policy server: loading (since, timeout, log), external, ready / dead, none."""

    policy_server_state: str
    policy_identity: str
    policy_server_loads: int
    policy_server_alive: bool


class Stopping(Exception):
    """The worker was told to stop while waiting."""


StartGuard = Callable[[PolicySpec, Path], contextlib.AbstractContextManager[None]]


class SharedPolicyServer:
    """Slots of one GPU share one server; a different identity waits until the current users are done.

    An external policy (policy.url) needs no lease of the server: its batches go to the config's URL (each
    checks it with a handshake), nothing is started, stopped or waited for here. `on_change` is called when
    the state that `state()` reports changes (the worker rewrites its status.json)."""

    def __init__(self, server: GuardedPolicyServer, on_change: Callable[[], None] | None = None):
        self.server = server
        self.on_change = on_change
        self.cond = threading.Condition()
        self.users = 0
        self.loading: ServerLoading | None = None  # the server starting now
        self.external_users = 0
        self.external_identity: str | None = None  # the external policy last used

    def state(self) -> ServerState:
        """For status.json: "loading" (since when, timeout, log), "external", "ready" / "dead" (loads) or "none"."""
        loading = self.loading
        if loading is not None:
            return {"policy_server_state": "loading", **loading, "policy_server_loads": self.server.loads}
        spec = self.server.spec
        if self.external_identity is not None and (self.external_users or spec is None):
            return {"policy_server_state": "external", "policy_identity": self.external_identity}
        if spec is None:
            return {"policy_server_state": "none", "policy_server_loads": self.server.loads}
        alive = self.server.alive()
        return {
            "policy_server_state": "ready" if alive else "dead",
            "policy_identity": spec.identity,
            "policy_server_loads": self.server.loads,
            "policy_server_alive": alive,
        }

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    @contextlib.contextmanager
    def lease(
        self, spec: PolicySpec, stop: threading.Event, start_guard: StartGuard | None = None
    ) -> Iterator[JobStepContext]:
        """A ready server for `spec`, as its job step is told of it (the identity it serves, its endpoint and
        process, read while the lease holds it); a start it needs runs inside `start_guard(spec, log_path)` (the
        policy's circuit breaker, evalwf.worker.policy_breaker)."""
        if spec.external:
            with self._external(spec, stop) as served:
                yield served
            return
        with self.cond:
            while self.users > 0 and serving_refusal(self._served(), spec.identity) is not None:
                if stop.is_set():
                    raise Stopping()
                self.cond.wait(0.5)
            if stop.is_set():
                raise Stopping()
            previous = self._served()
            refusal = serving_refusal(previous, spec.identity)
            if not (self.server.alive() and refusal is None):
                if self.server.process is not None and refusal is None:
                    log(f"policy server {previous} died; restarting it")
                elif previous is not None and refusal is not None:
                    log(f"policy identity changed {previous} -> {spec.identity}; restarting the policy server")
                log_path = self.server.log_path(spec, self.server.loads + 1)
                with start_guard(spec, log_path) if start_guard is not None else contextlib.nullcontext():
                    self._start(spec)
            self.users += 1
            served = JobStepContext(
                policy_identity=self._served(),
                endpoint=self.server.endpoint,
                server_process=self.server.process_identity,  # what the job step's client verifies
            )
        try:
            yield served
        finally:
            with self.cond:
                self.users -= 1
                self.cond.notify_all()

    def _served(self) -> str | None:
        """The identity of the policy the worker's own server was last started for (None: none yet)."""
        return self.server.spec.identity if self.server.spec is not None else None

    def _start(self, spec: PolicySpec) -> None:
        log_path = self.server.log_path(spec, self.server.loads + 1)
        log(f"starting policy server {spec.identity} (timeout {spec.startup_timeout_s:g}s, log {log_path})")
        self.loading = {
            "policy_identity": spec.identity,
            "policy_server_loading_since": datetime.now(UTC).isoformat(),
            "policy_server_timeout_s": spec.startup_timeout_s,
            "policy_server_log": str(log_path),
        }
        self._changed()
        try:
            self.server.ensure(spec)
        finally:
            self.loading = None
            self._changed()
        log(f"policy server {spec.identity} ready at {self.server.endpoint} (load #{self.server.loads})")

    @contextlib.contextmanager
    def _external(self, spec: PolicySpec, stop: threading.Event) -> Iterator[JobStepContext]:
        if stop.is_set():
            raise Stopping()
        with self.cond:
            if serving_refusal(self.external_identity, spec.identity) is not None:
                log(f"policy {spec.identity} is external (policy.url): no policy server to start; each batch checks it")
            self.external_identity = spec.identity
            self.external_users += 1
        self._changed()
        try:
            # no process of ours: whatever this worker's own server runs (another policy's) is not this batch's
            yield JobStepContext(policy_identity=spec.identity, endpoint=EXTERNAL_ENDPOINT)
        finally:
            with self.cond:
                self.external_users -= 1
            self._changed()
