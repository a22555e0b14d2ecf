"""The circuit breaker of each policy (invariant 11: a broken policy costs minutes, not GPU-days): its state, shared
by the workers (who take start permits and record outcomes) and the submitter (who stops the policy's work and
says why), as small files under the workflow directory's .snakemake/labtasker/breaker/, which every worker of the
campaign reads and writes (the workflow directory is on a filesystem they all mount).

A policy's breaker opens, for the rest of the submission, when
- its server failed to start (crash, timeout, failed handshake) `max_failures` times while none of its starts had
  succeeded yet: before any start succeeded, at most `max_failures` starts are in flight or failed at any moment,
  however many workers race (numbered permits, each taken by an exclusive create), so a server that never starts
  costs at most that many starts in the whole campaign; once one start succeeded, the policy is proven to start
  and a later failure (one bad node) is an ordinary batch failure;
- or its first `max_failures` distinct batches all failed with the same reason (the normalised exception line of
  their job step logs) while none of its batches had succeeded: a policy that answers wrong shapes fails every
  episode, also when its server starts.

What resets a breaker: each submission (a new `snakemake` run with the labtasker executor) begins a new
generation (generation.json: its id and max_failures, read by the workers), so a user who fixed the policy (or its
environment, or a checkpoint file no digest sees) reruns the same command and the policy is tried again; that
submitter first names every policy the previous generation stopped, so a rerun of something still broken costs
at most max_failures more starts and never goes unsaid. Within a generation the state is kept per policy identity
and launch digest (everything a worker starts the server from, startup_timeout_s included): a changed command,
environment or timeout is a different breaker even where the identity stays the same. max_failures 0: off.

Every record is written complete or not at all (a temporary file hard-linked into place, which fails when the
name exists: an exclusive create that also holds on NFS) and never rewritten. Python 3.10-compatible.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

from evalwf.common.atomic import atomic_write_text

DEFAULT_MAX_FAILURES = 2  # the submitter's --labtasker-policy-breaker default, and the workers' without one
CIRCUIT_OPEN_ERROR = "PolicyCircuitOpen"  # the error type of a task failed because its policy's breaker is open
# A start permit whose holder reported nothing this long after its startup timeout was abandoned (a worker killed
# while loading): it no longer counts, and another worker may start the server.
ABANDONED_AFTER_S = 60.0
PERMIT_POLL_S = 1.0
NO_GENERATION = "none"  # tasks queued by no submitter of this version: one generation for all of them
_PERMIT = re.compile(r"start-(\d+)\.(json|ok|failed|aborted)")
_OUTCOME_RANK = {"aborted": 1, "ok": 2, "failed": 3}
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


# A value a breaker file holds, as json.loads gives it.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JsonRecord = dict[str, JsonValue]


class _FailureWhere(TypedDict, total=False):
    log: str  # host:path of the server log (start) or of the job step log (batch)
    detail: str  # the last lines of that log


class Failure(_FailureWhere):
    """Why a start or a batch failed, as the worker records it (open.json quotes the one that opened the breaker)."""

    reason: str


@dataclass
class Permit:
    """What the files of one numbered start permit say: who took it until when, and how it ended."""

    outcome: str | None = None  # ok | failed | aborted; None while its start is in progress
    holder: JsonValue = None  # Holder's fields, as its taker wrote them
    deadline: float | None = None  # its startup timeout, as a time.time()
    failure: JsonRecord = field(default_factory=dict)  # a failed start's Failure, with "at"


class CircuitOpen(Exception):
    """The policy's breaker is open: nothing of it may start."""

    def __init__(self, record: OpenRecord):
        super().__init__(record.summary())
        self.record = record


class PermitWaitStopped(Exception):
    """Told to stop while waiting for another worker's start of the same policy to end."""


def breaker_root(workdir: str | os.PathLike[str]) -> Path:
    return Path(workdir) / ".snakemake" / "labtasker" / "breaker"


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017 (Python 3.10)


def _write_once(path: Path, data: JsonRecord) -> bool:
    """Create `path` holding `data`, complete, unless it exists: whether this call created it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    finally:
        temporary.unlink()


def _read(path: Path) -> JsonRecord | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# -- generations -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generation:
    id: str
    max_failures: int


def current_generation(workdir: str | os.PathLike[str]) -> Generation:
    """The generation the latest submitter began (the default for tasks that no submitter of ours queued)."""
    record = _read(breaker_root(workdir) / "generation.json") or {}
    max_failures = record.get("max_failures")
    if not isinstance(max_failures, int) or isinstance(max_failures, bool) or max_failures < 0:
        max_failures = DEFAULT_MAX_FAILURES
    identifier = record.get("generation")
    if not isinstance(identifier, str) or not identifier or _ID_CHARS.search(identifier):
        identifier = NO_GENERATION
    return Generation(identifier, max_failures)


def begin_generation(workdir: str | os.PathLike[str], max_failures: int) -> tuple[Generation, Generation]:
    """A submission starts: a fresh breaker for every policy. Returns (the new generation, the previous one)."""
    root = breaker_root(workdir)
    previous = current_generation(workdir)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")  # noqa: UP017 (Python 3.10)
    generation = Generation(f"{stamp}-{secrets.token_hex(3)}", max_failures)
    record = {"generation": generation.id, "max_failures": max_failures, "begun_at": _now_iso()}
    submitter = f"{socket.gethostname()}:{os.getpid()}"
    atomic_write_text(root / "generation.json", json.dumps({**record, "submitter": submitter}) + "\n")
    return generation, previous


# -- what an open breaker says -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenRecord:
    identity: str
    kind: str  # "start" (its server failed to start) or "batches" (its first batches failed alike)
    reason: str  # the cause, one line
    log: str  # host:path of the server log (start) or of the job step log (batches)
    detail: str  # the last lines of that log
    failures: int
    max_failures: int
    opened_at: str

    def summary(self) -> str:
        if self.kind == "start":
            what = f"its server failed to start {self.failures} time(s) and never started"
        else:
            what = f"its first {self.failures} batches all failed for the same reason"
        return (
            f"policy {self.identity} is stopped for this submission (circuit breaker, --labtasker-policy-breaker "
            f"{self.max_failures}): {what}: {self.reason}; log {self.log}"
        )

    @classmethod
    def from_dict(cls, data: JsonRecord) -> OpenRecord | None:
        try:
            return cls(**{name: data[name] for name in cls.__dataclass_fields__})
        except (KeyError, TypeError):
            return None


def policy_key(identity: str, launch_digest: str) -> str:
    """A directory name per (identity, launch digest): readable, filesystem-safe, collision-free."""
    name = _ID_CHARS.sub("_", identity.split("@", 1)[0])[:48] or "policy"
    digest = hashlib.sha256(f"{identity}\0{launch_digest}".encode()).hexdigest()[:16]
    return f"{name}-{digest}"


def open_policies(workdir: str | os.PathLike[str], generation: str) -> dict[str, OpenRecord]:
    """Every policy whose breaker is open in `generation` (identity -> why): what the submitter stops."""
    found: dict[str, OpenRecord] = {}
    directory = breaker_root(workdir) / generation
    with contextlib.suppress(OSError):
        for entry in sorted(directory.iterdir()):
            record = OpenRecord.from_dict(_read(entry / "open.json") or {})
            if record is not None:
                found.setdefault(record.identity, record)
    return found


# -- one policy's breaker ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """Who holds a start permit, to tell an abandoned permit from a start in progress."""

    worker: str
    host: str
    pid: int
    pid_namespace: int  # two workers of one host in different pid namespaces never judge each other's pids

    @classmethod
    def this_process(cls, worker: str) -> Holder:
        try:
            namespace = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            namespace = 0
        return cls(worker, socket.gethostname(), os.getpid(), namespace)

    def gone(self) -> bool:
        """Certainly dead: a process of this host and pid namespace that no longer exists."""
        if (self.host, self.pid_namespace) != (socket.gethostname(), Holder.this_process("").pid_namespace):
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False


class PolicyBreaker:
    """The breaker of one policy (identity + launch digest) in one generation."""

    def __init__(self, workdir: str | os.PathLike[str], identity: str, launch_digest: str, generation: Generation):
        self.identity = identity
        self.max_failures = generation.max_failures
        self.directory = breaker_root(workdir) / generation.id / policy_key(identity, launch_digest)

    @property
    def enabled(self) -> bool:
        return self.max_failures > 0

    def open_record(self) -> OpenRecord | None:
        return OpenRecord.from_dict(_read(self.directory / "open.json") or {})

    def check(self) -> None:
        record = self.open_record() if self.enabled else None
        if record is not None:
            raise CircuitOpen(record)

    def _open(self, kind: str, failure: Failure | JsonRecord, failures: int) -> OpenRecord:
        """Open (the first writer's record stands) and return the record that stands."""
        record = OpenRecord(
            identity=self.identity,
            kind=kind,
            reason=str(failure.get("reason", "")),
            log=str(failure.get("log", "")),
            detail=str(failure.get("detail", "")),
            failures=failures,
            max_failures=self.max_failures,
            opened_at=_now_iso(),
        )
        _write_once(self.directory / "open.json", asdict(record))
        return self.open_record() or record

    # server starts ------------------------------------------------------------------------------------------------

    def _permits(self) -> dict[int, Permit]:
        """number -> what its files say."""
        permits: dict[int, Permit] = {}
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.directory):
                match = _PERMIT.fullmatch(name)
                if match is None:
                    continue
                entry = permits.setdefault(int(match.group(1)), Permit())
                kind = match.group(2)
                if kind == "json":
                    taken = _read(self.directory / name) or {}
                    entry.holder = taken.get("holder")
                    deadline = taken.get("deadline")
                    if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
                        entry.deadline = float(deadline)
                elif _OUTCOME_RANK[kind] > _OUTCOME_RANK.get(entry.outcome or "", 0):
                    entry.outcome = kind  # its holder's failure stands over a waiter's "abandoned"
                    if kind == "failed":
                        entry.failure = _read(self.directory / name) or {}
        return permits

    def _expire_abandoned(self, permits: dict[int, Permit], now: float) -> None:
        for number, entry in permits.items():
            if entry.outcome is not None or entry.deadline is None:
                continue
            try:
                gone = Holder(**entry.holder).gone() if isinstance(entry.holder, dict) else False
            except TypeError:
                gone = False
            if gone or now > entry.deadline + ABANDONED_AFTER_S:
                why = "its worker is gone" if gone else "its worker reported nothing after its startup timeout"
                _write_once(self.directory / f"start-{number:04d}.aborted", {"reason": why, "at": _now_iso()})
                entry.outcome = "aborted"

    def acquire_start(self, holder: Holder, timeout_s: float, stop: threading.Event) -> StartPermit | None:
        """Permission to start this policy's server: None when no permit is needed (the breaker is off, or a start
        already succeeded); raises CircuitOpen when the breaker is open, PermitWaitStopped when `stop` is set while
        every permit is held by starts in progress (it waits for them otherwise)."""
        if not self.enabled:
            return None
        while True:
            self.check()
            if (self.directory / "proven").exists():
                return None
            permits = self._permits()
            self._expire_abandoned(permits, time.time())
            failed = [entry for entry in permits.values() if entry.outcome == "failed"]
            if len(failed) >= self.max_failures:
                latest = max(failed, key=lambda entry: str(entry.failure.get("at", "")))
                raise CircuitOpen(self._open("start", latest.failure, len(failed)))
            counting = [number for number, entry in permits.items() if entry.outcome != "aborted"]
            if len(counting) < self.max_failures:
                number = max(permits, default=0) + 1
                taken = {"holder": asdict(holder), "taken_at": time.time(), "deadline": time.time() + timeout_s}
                if _write_once(self.directory / f"start-{number:04d}.json", taken):
                    return StartPermit(self, number)
                continue  # another worker took that number first: look again
            if stop.wait(PERMIT_POLL_S):
                raise PermitWaitStopped()

    # batches --------------------------------------------------------------------------------------------------------

    def batch_succeeded(self) -> None:
        if self.enabled and not (self.directory / "batch-ok").exists():
            _write_once(self.directory / "batch-ok", {"at": _now_iso()})

    def batch_failed(self, task_id: str, signature: str | None, failure: Failure) -> OpenRecord | None:
        """Record a batch's failure (its first one: a retry of the same batch adds nothing); returns the record when
        this opened the breaker: max_failures distinct batches failed, none succeeded, all with one signature."""
        if not self.enabled or (self.directory / "batch-ok").exists():
            return None
        safe = _ID_CHARS.sub("_", task_id)[:80]
        _write_once(self.directory / f"batch-failed-{safe}", {"signature": signature, **failure, "at": _now_iso()})
        records = [
            _read(self.directory / name) or {}
            for name in sorted(os.listdir(self.directory))
            if name.startswith("batch-failed-")
        ]
        signatures = {record.get("signature") for record in records}
        if len(records) < self.max_failures or len(signatures) != 1 or None in signatures:
            return None
        if (self.directory / "batch-ok").exists():
            return None
        return self._open("batches", records[0], len(records))


class StartPermit:
    """One numbered start of a policy's server; its outcome is recorded exactly once."""

    def __init__(self, breaker: PolicyBreaker, number: int):
        self.breaker = breaker
        self.number = number

    def _outcome(self, outcome: str, data: JsonRecord) -> bool:
        return _write_once(self.breaker.directory / f"start-{self.number:04d}.{outcome}", {**data, "at": _now_iso()})

    def succeeded(self) -> None:
        self._outcome("ok", {})
        _write_once(self.breaker.directory / "proven", {"at": _now_iso()})

    def aborted(self, why: str) -> None:
        """Not the policy's doing (the worker was told to stop): the start does not count."""
        self._outcome("aborted", {"reason": why})

    def failed(self, failure: Failure) -> tuple[int, OpenRecord | None]:
        """(failed starts so far, the open record when this opened the breaker)."""
        self._outcome("failed", failure)
        permits = self.breaker._permits()
        failed = sum(1 for entry in permits.values() if entry.outcome == "failed")
        proven = (self.breaker.directory / "proven").exists()
        if failed >= self.breaker.max_failures and not proven:
            return failed, self.breaker._open("start", failure, failed)
        return failed, None
