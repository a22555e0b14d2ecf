"""The worker's side of the per-policy circuit breaker (the state and its rules: evalwf.queue.breaker).

Before a task's batch runs: an open breaker fails the task at once (error type PolicyCircuitOpen, no server
started). Around each server start: a numbered permit (at most max_failures starts before one succeeded, across
all workers), the outcome recorded, and the worker's error message saying how many of the allowed starts failed.
After each batch: its outcome, with the normalised cause of a failed job step, for the "first batches all fail
alike" rule. Bookkeeping that cannot be written (a read-only or full disk) never stops work: the batch runs
unguarded and the worker says so.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from evalwf.common.hashing import short_hash
from evalwf.policy.client import PolicyServerError
from evalwf.policy.spec import PolicySpec
from evalwf.queue.breaker import (
    CIRCUIT_OPEN_ERROR,
    CircuitOpen,
    Failure,
    Holder,
    PermitWaitStopped,
    PolicyBreaker,
    current_generation,
)
from evalwf.worker.job_payload import JobStep
from evalwf.worker.log import log
from evalwf.worker.shared_server import StartGuard, Stopping

DETAIL_CHARS = 1500  # of a log's end, kept with a failure (what the submitter's one message shows)
LOG_TAIL_BYTES = 256 * 1024  # of a job step log, searched for its cause
# The line where a job step says why it failed (evalwf.rules.jobs.logged_to), and a Python exception line.
FAILED_LINE = re.compile(r"^(?:\[[\d:]+\]\s*)?FAILED: (.+)$")
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Timeout|Exit)(?::\s.*)?$")
NUMBERS = re.compile(r"\d+")
LOG_SUFFIX = re.compile(r";?\s*log \S+:?$")


class PolicyCircuitOpen(PolicyServerError):
    """The task's policy is stopped for this submission: its task fails at once, with the breaker's reason."""

    error_type = CIRCUIT_OPEN_ERROR


def launch_digest(spec: PolicySpec) -> str:
    """Everything a worker starts the server from (the identity's keys and the operational ones: a raised
    startup timeout is a fix worth trying)."""
    return short_hash(spec.to_dict(), 16)


def failure_cause(log_text: str) -> str | None:
    """The line that says why a job step failed: the exception line ending the last traceback printed before the
    job body's FAILED line (the root cause, e.g. from the simulator's interpreter), else that FAILED line's text."""
    lines = [line.strip() for line in log_text.splitlines()]
    for index, line in enumerate(lines):
        match = FAILED_LINE.match(line)
        if match is None:
            continue
        tracebacks = [at for at in range(index) if lines[at] == "Traceback (most recent call last):"]
        after = lines[tracebacks[-1] : index] if tracebacks else []
        raised = [text for text in after if EXCEPTION_LINE.match(text)]
        return raised[-1] if raised else match.group(1).strip()
    return None


def error_context(log_text: str, cause: str | None, limit: int = DETAIL_CHARS) -> str:
    """What of a failed job step's log explains it: the lines up to and including the first line that states its
    cause (the traceback leading to it), not the log's end, where Snakemake says "Shutting down, this might take
    some time." and names its own log; the end only when the cause is not found in the log."""
    lines = log_text.splitlines()
    needle = (cause or "").strip()
    at = next((index for index, line in enumerate(lines) if needle and needle in line), None)
    if at is None:
        return log_text[-limit:]
    return "\n".join(lines[: at + 1])[-limit:]


def signature(cause: str | None) -> str | None:
    """Causes that differ only in numbers (ports, episode indices, shapes) are one reason."""
    return NUMBERS.sub("#", cause)[:300] if cause else None


def _tail(path: Path, limit: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class WorkerBreakers:
    """One per worker process; its slots share it (a policy's starts are serialised by SharedPolicyServer)."""

    def __init__(self, worker_id: str, host: str):
        self.holder = Holder.this_process(worker_id)
        self.host = host
        self._warned = False

    def _breaker(self, step: JobStep) -> PolicyBreaker | None:
        if step.policy is None:
            return None
        try:
            generation = current_generation(step.workdir)
        except OSError as error:
            self._unguarded(error)
            return None
        breaker = PolicyBreaker(step.workdir, step.policy.identity, launch_digest(step.policy), generation)
        return breaker if breaker.enabled else None

    def _unguarded(self, error: OSError) -> None:
        if not self._warned:
            self._warned = True
            log(f"policy circuit breaker: cannot keep its records ({error}); batches run unguarded")

    def check(self, step: JobStep) -> None:
        """Raise PolicyCircuitOpen when the task's policy is stopped: nothing is started for it."""
        breaker = self._breaker(step)
        if breaker is None:
            return
        try:
            breaker.check()
        except CircuitOpen as error:
            raise PolicyCircuitOpen(str(error)) from None
        except OSError as error:
            self._unguarded(error)

    def start_guard(self, step: JobStep, stop: threading.Event) -> StartGuard | None:
        """What SharedPolicyServer wraps each start of this task's policy server in."""
        breaker = self._breaker(step)
        if breaker is None:
            return None

        @contextlib.contextmanager
        def guard(spec: PolicySpec, log_path: Path) -> Iterator[None]:
            try:
                permit = breaker.acquire_start(self.holder, spec.startup_timeout_s, stop)
            except CircuitOpen as error:
                raise PolicyCircuitOpen(str(error)) from None
            except PermitWaitStopped:
                raise Stopping() from None
            except OSError as error:
                self._unguarded(error)
                permit = None
            if permit is None:
                yield
                return
            try:
                yield
            except PolicyServerError as error:
                if stop.is_set():  # the worker stopped it: not the policy's doing
                    permit.aborted("the worker was stopping")
                    raise
                reason = LOG_SUFFIX.sub("", str(error).splitlines()[0] if str(error) else type(error).__name__)
                failure: Failure = {
                    "reason": reason,
                    "log": f"{self.host}:{log_path}",
                    "detail": _tail(log_path, DETAIL_CHARS),
                }
                failed, opened = permit.failed(failure)
                allowed = breaker.max_failures
                if opened is not None:
                    note = f"{opened.summary()}; its other batches fail without starting it"
                else:
                    note = (
                        f"failed start {failed} of the {allowed} this policy may fail before its circuit breaker "
                        "stops it for this submission (--labtasker-policy-breaker)"
                    )
                raise PolicyServerError(f"{error}\n{note}") from error
            except BaseException:
                permit.aborted("the start was interrupted")
                raise
            else:
                permit.succeeded()

        return guard

    def batch_done(
        self, step: JobStep, task_id: str, *, ok: bool, log_path: Path | None = None, cause: str | None = None
    ) -> None:
        """A batch of the task's policy ended (ok, or its job step failed; log_path: that job step's log; cause:
        the exception its job body recorded, evalwf.contract.failure, else it is looked for in the log)."""
        breaker = self._breaker(step)
        if breaker is None:
            return
        try:
            if ok:
                breaker.batch_succeeded()
                return
            text = _tail(log_path, LOG_TAIL_BYTES) if log_path is not None else ""
            cause = cause or failure_cause(text)
            failure: Failure = {
                "reason": cause or "the job step failed (no cause found in its log)",
                "log": f"{self.host}:{log_path}",
                "detail": error_context(text, cause),
            }
            opened = breaker.batch_failed(task_id, signature(cause), failure)
            if opened is not None:
                log(opened.summary())
        except OSError as error:
            self._unguarded(error)
