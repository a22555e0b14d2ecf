"""The queue's ceiling: one real Labtasker server (the embedded one, on its loopback Unix socket) under many
emulated workers and the real submitter's status rounds, and `snakemake -n` on very large campaigns.

    python scripts/bench_queue_ceiling.py [--tasks 10000] [--workers 64,128,256] [--batch-s 300] [--speedup 10]
        [--window-s 120] [--dry-run-sizes 10000,50000] [--skip queue|dry-run] [--json out.json] [--keep-logs DIR]

--workers takes counts (64), counts at their own speedup (256x1: real speed) and idle slots beside them (64x1+192:
192 more that find nothing to claim and poll as an idle worker does, the end of a campaign).

1. Queue: the real submitter (snakemake --profile profiles/labtasker, `--jobs` = every batch) queues --tasks
   batches of a stand-in campaign; measured: time to queue them, the submitter's peak memory, its CPU while it only
   polls (its own status rounds over every queued batch); then it is killed (kill -9: its tasks stay queued, as after
   a killed submitter).
2. Workers: for each count W of --workers, a fresh server process over the same database and W emulated workers,
   each a thread doing what one evalwf worker slot does through evalwf.worker.queue_client (its own client; claim
   with policy affinity, progress report, heartbeats, complete, its registration kept up to date by Labtasker's own
   reporter) with no job step: a claimed batch "runs" by sleeping. Beside them, the plugin's StatusPoller polls
   the active batches every `seconds-between-status-checks` of profiles/labtasker, as the submitter does, replacing
   finished batches with queued ones as Snakemake would. Time is compressed by --speedup: a batch lasts --batch-s
   / speedup (uniform between 0.5x and 1.5x of it) and heartbeats come every --heartbeat-s / speedup, so W emulated
   workers put the request load of W x speedup real workers on the server (the status interval is not
   compressed). Measured over --window-s: claims/s sustained against the claims/s asked for, claim latency
   p50/p95/max (both claim calls of a slot with a policy loaded), heartbeat and complete latency, errors by code
   (database_busy = SQLite lock contention the server gave up on), requests by kind and status from the server's
   access log, status round cost (bytes, client CPU, wall),
   server CPU, and the server's own database metrics (write transactions' time share: the SQLite write lock is
   held or waited for; connection waits; busy failures), read from its log where it writes them every 60 s.
3. `snakemake -n` of the same stand-in campaign at each of --dry-run-sizes batches (manifests built first):
   wall, CPU and peak memory (the process's own rusage).

Every loop is bounded in count and time; nothing leaves the machine (one Unix socket). Sized for a 2-core machine.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import os
import random
import re
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scheduling as sched  # (the stand-in campaign, manifests, the submitter run, counting)

from evalwf.queue.embedded_server import ensure_embedded_server, server_status, stop_embedded_server
from evalwf.worker import queue_client

REPO = sched.REPO
PROFILE = REPO / "profiles" / "labtasker"
STAND_IN_TASKS = sum(len(tasks) for tasks in sched.MIX.values())
FINISHED = ("succeeded", "failed", "cancelled")
METRICS_LINE = re.compile(r"^(\S+) INFO \[labtasker-server\] database metrics (\{.*\})\s*$")


# -- pure helpers (tests/scripts/test_bench_queue_ceiling.py) ----------------------------------------------------


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (share in [0, 1]) of `values`; nan when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(share * len(ordered))))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Pacing:
    """How the emulated workers' time is compressed: a batch of `batch_s` real seconds lasts batch_s / speedup
    here, heartbeats come `speedup` times as often, so each emulated worker asks what `speedup` real ones do."""

    batch_s: float
    heartbeat_s: float
    speedup: float

    @property
    def emulated_batch_s(self) -> float:
        return self.batch_s / self.speedup

    @property
    def emulated_heartbeat_s(self) -> float:
        return self.heartbeat_s / self.speedup

    def batch_duration(self, rng: random.Random) -> float:
        """One batch's emulated duration: uniform in [0.5, 1.5] x emulated_batch_s (mean emulated_batch_s)."""
        return self.emulated_batch_s * rng.uniform(0.5, 1.5)

    def claims_per_s_asked(self, workers: int) -> float:
        """What `workers` emulated workers ask for when every claim is answered at once."""
        return workers / self.emulated_batch_s

    def real_workers(self, workers: int) -> int:
        return round(workers * self.speedup)


class DatabaseMetrics(TypedDict):
    """The server's database metrics of one log line, reduced: totals per operation kind since it started."""

    at: str
    transaction_s: dict[str, float]
    transaction_max_s: dict[str, float]
    transactions: dict[str, int]
    connection_wait_s: dict[str, float]
    busy_failures: dict[str, int]
    pool_timeouts: dict[str, int]


def last_database_metrics(log_text: str) -> DatabaseMetrics | None:
    """The last `database metrics {...}` line a Labtasker 2.8 server wrote (every 60 s, at its expiry scan)."""
    found: DatabaseMetrics | None = None
    for line in log_text.splitlines():
        match = METRICS_LINE.match(line)
        if not match:
            continue
        raw = ast.literal_eval(match.group(2))
        transactions = raw.get("db_transaction_seconds", {})
        waits = raw.get("db_connection_wait_seconds", {})
        found = {
            "at": match.group(1),
            "transaction_s": {op: m["total_seconds"] for op, m in transactions.items()},
            "transaction_max_s": {op: m["max_seconds"] for op, m in transactions.items()},
            "transactions": {op: m["count"] for op, m in transactions.items()},
            "connection_wait_s": {op: m["total_seconds"] for op, m in waits.items()},
            "busy_failures": dict(raw.get("db_sqlite_busy_failures", {})),
            "pool_timeouts": dict(raw.get("db_pool_timeouts", {})),
        }
    return found


ACCESS_LINE = re.compile(r'"(GET|PUT|POST|DELETE) (/[^ ?"]*)[^"]*" (\d{3})')
ID_SEGMENT = re.compile(r"/(tasks|workers)/(?!count\b|claim\b)[^/]+")


def request_counts(log_text: str) -> dict[str, int]:
    """Requests the server answered, from its access log lines: `METHOD path status` -> count, task and worker
    ids folded (`POST /api/v2/queues/evalwf/tasks/{id}/heartbeat 200`); a 503 is a request it gave up on
    (database_busy: SQLite's write lock was not free within its 5 s busy timeout)."""
    counts: Counter[str] = Counter()
    for match in ACCESS_LINE.finditer(log_text):
        path = ID_SEGMENT.sub(lambda m: f"/{m.group(1)}/{{id}}", match.group(2))
        counts[f"{match.group(1)} {path} {match.group(3)}"] += 1
    return dict(counts.most_common())


def database_shares(metrics: DatabaseMetrics | None, covers_s: float, server_cores: float) -> dict[str, Any]:
    """Per second of the covered time: write transactions (each holds SQLite's one write lock from BEGIN
    IMMEDIATE, waiting for it included: a share near or over 1 means writers queue for the lock), transactions,
    and the server's CPU per transaction (its CPU share over the window / transactions per second)."""
    if metrics is None or covers_s <= 0:
        return {"covers_s": covers_s, "metrics": metrics}
    counted = sum(n for op, n in metrics["transactions"].items() if op in ("read", "write"))
    per_s = counted / covers_s
    return {
        "covers_s": covers_s,
        "write_lock_share": metrics["transaction_s"].get("write", 0.0) / covers_s,
        "writes_per_s": metrics["transactions"].get("write", 0) / covers_s,
        "transactions_per_s": per_s,
        "write_max_s": metrics["transaction_max_s"].get("write", 0.0),
        "busy_failures": sum(metrics["busy_failures"].values()) + sum(metrics["pool_timeouts"].values()),
        "server_cpu_ms_per_transaction": 1000 * server_cores / per_s if per_s else None,
        "metrics": metrics,
    }


@dataclass(frozen=True)
class WindowSpec:
    """One measured window: `workers` busy emulated workers at `speedup`, beside `idle` idle ones polling."""

    workers: int
    speedup: float
    idle: int = 0


SPEC = re.compile(r"^(\d+)(?:x(\d+(?:\.\d+)?))?(?:\+(\d+))?$")


def window_specs(text: str, speedup: float) -> list[WindowSpec]:
    """`64,256x1,64x1+192` -> 64 workers at `speedup`; 256 at speedup 1; 64 at speedup 1 beside 192 idle ones."""
    specs = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = SPEC.match(part.strip())
        if not match or int(match.group(1)) + int(match.group(3) or 0) < 1:
            raise argparse.ArgumentTypeError(
                f"--workers {text!r}: {part!r} is not a worker count (e.g. 64, 256x1 for speedup 1, 64x1+192 for 192 "
                "idle workers beside them)"
            )
        factor = float(match.group(2)) if match.group(2) else speedup
        specs.append(WindowSpec(int(match.group(1)), factor, int(match.group(3) or 0)))
    return specs


class ActiveWindow:
    """The batches a submitter with `cap` jobs in flight asks about: the first `cap` of the queue; each one seen
    finished is replaced by the next queued one (Snakemake submits a new job as one finishes)."""

    def __init__(self, queued: list[str], cap: int):
        self._queued = queued
        self._next = min(cap, len(queued))
        self.active = list(queued[: self._next])

    def finished(self, task_ids: set[str]) -> None:
        if not task_ids:
            return
        kept = [task_id for task_id in self.active if task_id not in task_ids]
        refill = self._queued[self._next : self._next + len(self.active) - len(kept)]
        self._next += len(refill)
        self.active = kept + refill


# -- 1. the real submitter queues the campaign -------------------------------------------------------------------


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


class PeakRss:
    """Peak resident memory of one process, sampled every `every` seconds from a thread."""

    def __init__(self, pid: int, every: float = 0.25):
        self.peak = 0
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(every,), daemon=True)
        self._thread.start()

    def _sample(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.peak = max(self.peak, self._process.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def stand_in_config(workdir: Path, batches: int) -> tuple[Path, int]:
    """A stand-in campaign of at least `batches` one-episode batches (7 tasks), and how many it has."""
    per_task = -(-batches // STAND_IN_TASKS)
    return sched.campaign_config(workdir, workdir / "cache", per_task, 1, 0.0), per_task * STAND_IN_TASKS


def profile_setting(name: str) -> Any:
    return yaml.safe_load((PROFILE / "config.yaml").read_text())[name]


def queue_campaign(workdir: Path, tasks: int, idle_s: float, timeout_s: float) -> dict[str, Any]:
    config, total = stand_in_config(workdir, tasks)
    started = time.time()
    sched.build_manifests(workdir, config)
    out: dict[str, Any] = {"batches": total, "manifests_s": time.time() - started, "load_at_start": load_line()}
    endpoint = ensure_embedded_server(workdir, log=lambda _: None)
    argv = sched.snakemake_argv(
        workdir, config, "--profile", str(PROFILE), "--labtasker-allow-workflow", str(REPO), "--jobs", str(total)
    )
    run = sched.StampedRun(argv, workdir, workdir / "submitter.log", sched.embedded_env())
    peak = PeakRss(run.process.pid)
    try:
        with endpoint.client("evalwf") as client:
            queued = sched.wait_count(client, total, timeout_s)
            first = run.first("[labtasker] job ")
            out["queued"] = client.count_tasks()
            out["queue_s_from_start"] = (queued or float("nan")) - run.started
            out["queue_s_from_first_submission"] = (queued or float("nan")) - (first or float("nan"))
            submitter = psutil.Process(run.process.pid)
            time.sleep(3)
            c0, t0 = submitter.cpu_times(), time.time()
            time.sleep(idle_s)
            c1, t1 = submitter.cpu_times(), time.time()
            out["idle_submitter_core_pct"] = 100 * ((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0)
            out["submitter_rss_mib"] = submitter.memory_info().rss / 2**20
    finally:
        out["submitter_peak_rss_mib"] = peak.stop() / 2**20
        run.process.kill()  # kill -9: what it queued stays queued, as after a killed submitter
        run.wait(30)
        stop_embedded_server(workdir / ".labtasker")
    out["load_at_end"] = load_line()
    return out


# -- 2. emulated workers and the submitter's status rounds -------------------------------------------------------


@dataclass
class Tally:
    """What the emulated workers measured (shared, under `lock`)."""

    claim_s: list[float] = field(default_factory=list)
    claim_at: list[float] = field(default_factory=list)
    heartbeat_s: list[float] = field(default_factory=list)
    complete_s: list[float] = field(default_factory=list)
    idle_claim_s: list[float] = field(default_factory=list)
    empty_claims: int = 0
    completed: int = 0
    handed_back: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, call: str, error: BaseException) -> None:
        code = getattr(error, "code", None) or type(error).__name__
        with self.lock:
            self.errors[f"{call}: {code}"] += 1


def _timed(tally: Tally, bucket: list[float], call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        tally.error(call, error)
        raise
    finally:
        with tally.lock:
            bucket.append(time.perf_counter() - started)


def emulated_worker(endpoint: Any, index: int, pacing: Pacing, stop: threading.Event, tally: Tally) -> None:
    """One worker slot's queue traffic with a no-op job step; bounded by `stop` (set at the window's end)."""
    rng = random.Random(index)
    route = profile_setting("labtasker-route")
    with endpoint.client("evalwf") as client:
        metadata: queue_client.WorkerObservation = {
            "worker": f"emulated-{index}", "host": "loopback", "pid": os.getpid(), "gpu": str(index), "slots": 1
        }  # fmt: skip
        with queue_client.WorkerRegistration(client, route=route, metadata=metadata) as registration:
            loaded: str | None = None
            while not stop.is_set():
                run_id = f"r_{secrets.token_urlsafe(9)}"  # as the worker makes them
                try:
                    claim = _timed(tally, tally.claim_s, "claim", queue_client.claim_preferring,
                                   client, route=route, run_id=run_id, loaded=loaded)  # fmt: skip
                except Exception:
                    stop.wait(1.0)
                    continue
                if claim is None:
                    with tally.lock:
                        tally.empty_claims += 1
                    stop.wait(2.0)  # the worker's --poll-max
                    continue
                with tally.lock:
                    tally.claim_at.append(time.monotonic())
                loaded = claim.task.args.get("policy_identity")
                registration.activity(claim.task.id)
                if not _run_batch(client, claim, index, pacing, rng, stop, tally):
                    with contextlib.suppress(Exception):
                        queue_client.unclaim(client, claim)  # a stopping worker hands its task back uncharged
                    with tally.lock:
                        tally.handed_back += 1
                    return
                registration.activity(None)


def idle_poller(endpoint: Any, index: int, stop: threading.Event, tally: Tally) -> None:
    """An idle worker slot at the end of a campaign: claims, finds nothing, waits as the worker does (0.2 s,
    doubling up to its --poll-max of 2 s), claims again. It asks a route nobody submits to, so the busy
    workers' queue stays as it is (the server answers both alike: no pending task on that route)."""
    route = f"{profile_setting('labtasker-route')}.idle-probe"
    backoff = 0.2
    with endpoint.client("evalwf") as client:
        while not stop.is_set():
            try:
                claimed = _timed(tally, tally.idle_claim_s, "idle claim", queue_client.claim,
                                 client, route=route, run_id=f"r_{secrets.token_urlsafe(9)}")  # fmt: skip
            except Exception:
                claimed = None
            if claimed is not None:  # nobody submits there; never keep what is not ours
                queue_client.unclaim(client, claimed)
            if stop.wait(backoff):
                return
            backoff = min(2 * backoff, 2.0)


def _run_batch(
    client: Any, claim: Any, index: int, pacing: Pacing, rng: random.Random, stop: threading.Event, tally: Tally
) -> bool:
    """Progress, heartbeats until the batch's time is up, complete. False when stopped before it finished."""
    with contextlib.suppress(Exception):
        queue_client.report_progress(
            client, claim, {"job_step": "started", "worker": f"emulated-{index}", "log": "/dev/null"}
        )
    duration = pacing.batch_duration(rng)
    ends = time.monotonic() + duration
    while (left := ends - time.monotonic()) > 0:
        if stop.wait(min(left, pacing.emulated_heartbeat_s)):
            return False
        if ends - time.monotonic() > 0:
            with contextlib.suppress(Exception):
                _timed(tally, tally.heartbeat_s, "heartbeat", queue_client.heartbeat, client, claim)
    result: queue_client.TaskResult = {"worker": f"emulated-{index}", "gpu": str(index), "duration_s": duration}
    for _attempt in range(3):  # bounded: the worker's own report retries a few times
        try:
            _timed(tally, tally.complete_s, "complete", queue_client.complete, client, claim, result)
            with tally.lock:
                tally.completed += 1
            return True
        except Exception:
            if stop.wait(0.5):
                return False
    return True


@dataclass
class Rounds:
    bytes: list[int] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    fetched: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


def status_rounds(endpoint: Any, campaign: str, window: ActiveWindow, every: float, stop: threading.Event) -> Rounds:
    """The submitter's status rounds (the plugin's StatusPoller) until `stop`; the first round asks by id."""
    # this script benchmarks the plugin itself: its status rounds are part of what the queue serves
    from snakemake_executor_plugin_labtasker.status_query import StatusPoller

    rounds = Rounds()
    poller = StatusPoller(campaign)
    with endpoint.client("evalwf") as client:
        counter = sched.CountingHttp(client)
        while not stop.is_set():
            b0, c0, w0 = counter.bytes, time.thread_time(), time.perf_counter()
            try:
                latest = poller.poll(client, window.active)
            except Exception as error:
                rounds.errors[getattr(error, "code", None) or type(error).__name__] += 1
                stop.wait(every)
                continue
            rounds.wall_s.append(time.perf_counter() - w0)
            rounds.client_cpu_s.append(time.thread_time() - c0)
            rounds.bytes.append(counter.bytes - b0)
            rounds.fetched.append(poller.last_fetched)
            window.finished({task_id for task_id, task in latest.items() if task.status in FINISHED})
            stop.wait(every)
    return rounds


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def workers_window(
    workdir: Path, workers: int, idle: int, pacing: Pacing, window_s: float, active_cap: int
) -> dict[str, Any]:
    """W emulated workers (and `idle` idle ones) and the status rounds for window_s s against a fresh server."""
    from evalwf.contract import campaign_key

    load_before = load_line()
    server_log = workdir / ".labtasker" / "server.log"
    log_offset = server_log.stat().st_size if server_log.exists() else 0
    endpoint = ensure_embedded_server(workdir, log=lambda _: None)
    server = psutil.Process(int(str(server_status(workdir / ".labtasker")["pid"])))
    server_started = time.monotonic()
    with endpoint.client("evalwf") as client:
        queued = [t.id for t in sched.all_tasks(client) if t.status == "pending"]
    stop, tally = threading.Event(), Tally()
    window = ActiveWindow(queued, active_cap)
    every = float(profile_setting("seconds-between-status-checks"))
    me = psutil.Process()
    server_cpu0, me_cpu0, wall0 = cpu_s(server), cpu_s(me), time.monotonic()
    threads = [
        threading.Thread(target=emulated_worker, args=(endpoint, i, pacing, stop, tally), daemon=True)
        for i in range(workers)
    ] + [threading.Thread(target=idle_poller, args=(endpoint, i, stop, tally), daemon=True) for i in range(idle)]
    rounds: list[Rounds] = []
    poller = threading.Thread(
        target=lambda: rounds.append(status_rounds(endpoint, campaign_key(str(workdir)), window, every, stop)),
        daemon=True,
    )
    for thread in [*threads, poller]:
        thread.start()
    stop.wait(window_s)
    stop.set()
    wall = time.monotonic() - wall0
    server_cpu, me_cpu = cpu_s(server) - server_cpu0, cpu_s(me) - me_cpu0
    for thread in [*threads, poller]:
        thread.join(max(1.0, 60 - (time.monotonic() - wall0 - window_s)))
    stuck = sum(thread.is_alive() for thread in [*threads, poller])
    # the server writes its metrics every 60 s after it started: the last line covers most of the window
    with open(server_log, "rb") as log:
        log.seek(log_offset)
        this_server = log.read().decode(errors="replace")
    metrics = last_database_metrics(this_server)
    covered = 60 * int((time.monotonic() - server_started) // 60)
    stop_embedded_server(workdir / ".labtasker")
    steady_from = pacing.emulated_batch_s * 1.5  # after the first wave of claims (every worker at once)
    steady = [t for t in tally.claim_at if t >= wall0 + steady_from]
    status = rounds[0] if rounds else Rounds()
    return {
        "workers": workers,
        "idle_workers": idle,
        "speedup": pacing.speedup,
        "as_real_workers": pacing.real_workers(workers),
        "window_s": wall,
        "load_before": load_before,
        "load_after": load_line(),
        "claims": len(tally.claim_at),
        "claims_per_s": len(tally.claim_at) / wall,
        "claims_per_s_steady": len(steady) / (wall - steady_from) if wall - steady_from >= 10 else None,
        "claims_per_s_asked": pacing.claims_per_s_asked(workers),
        "completed": tally.completed,
        "empty_claims": tally.empty_claims,
        "handed_back": tally.handed_back,
        "claim_latency_s": _latency(tally.claim_s),
        "heartbeat_latency_s": _latency(tally.heartbeat_s),
        "complete_latency_s": _latency(tally.complete_s),
        "idle_claim_latency_s": _latency(tally.idle_claim_s),
        "errors": dict(tally.errors),
        "server_core_pct": 100 * server_cpu / wall,
        "bench_process_core_pct": 100 * me_cpu / wall,
        "status_rounds": {
            "rounds": len(status.bytes),
            "active_ids_at_start": min(active_cap, len(queued)),
            "first_by_id": _round(status, 0),
            "later_median": _rounds_median(status),
            "later_max_wall_s": max(status.wall_s[1:], default=float("nan")),
            "errors": dict(status.errors),
        },
        "database": database_shares(metrics, covered, server_cpu / wall),
        "requests": request_counts(this_server),
        "threads_not_stopped": stuck,
    }


def _latency(values: list[float]) -> dict[str, float | int]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values, default=float("nan")),
    }


def _round(rounds: Rounds, index: int) -> dict[str, float]:
    if len(rounds.bytes) <= index:
        return {}
    return {
        "bytes": rounds.bytes[index],
        "client_cpu_s": rounds.client_cpu_s[index],
        "wall_s": rounds.wall_s[index],
        "fetched": rounds.fetched[index],
    }


def _rounds_median(rounds: Rounds) -> dict[str, float]:
    if len(rounds.bytes) < 2:
        return {}
    return {
        "bytes": statistics.median(rounds.bytes[1:]),
        "client_cpu_s": statistics.median(rounds.client_cpu_s[1:]),
        "wall_s": statistics.median(rounds.wall_s[1:]),
        "fetched": statistics.median(rounds.fetched[1:]),
    }


# -- 3. snakemake -n ---------------------------------------------------------------------------------------------


def dry_run(size: int, timeout_s: float) -> dict[str, Any]:
    """`snakemake -n` of a stand-in campaign of `size` batches (manifests built first): wall, CPU, peak RSS."""
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-dry-") as tmp:
        workdir = Path(tmp)
        config, total = stand_in_config(workdir, size)
        started = time.time()
        sched.build_manifests(workdir, config)
        manifests_s = time.time() - started
        load_before = load_line()
        argv = sched.snakemake_argv(workdir, config, "--profile", str(PROFILE), "-n", "-q")
        with open(workdir / "dry-run.log", "wb") as log:
            wall0 = time.monotonic()
            process = subprocess.Popen(
                argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=sched.embedded_env()
            )
            killer = threading.Timer(timeout_s, process.kill)
            killer.start()
            _, status, usage = os.wait4(process.pid, 0)
            killer.cancel()
            process.returncode = os.waitstatus_to_exitcode(status)
            wall = time.monotonic() - wall0
        tail = (workdir / "dry-run.log").read_text(errors="replace")[-1500:]
        return {
            "batches": total,
            "manifests_s": manifests_s,
            "exit": process.returncode,
            "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux: KiB
            "load_before": load_before,
            "load_after": load_line(),
            "log_tail": tail if process.returncode else "",
        }


# -- main --------------------------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000, help="batches queued (rounded up to 7 stand-in tasks)")
    parser.add_argument(
        "--workers",
        default="64,128,256",
        help="emulated worker counts, comma-separated; NxK: N at speedup K; N+I: and I idle workers polling",
    )
    parser.add_argument("--batch-s", type=float, default=300.0, help="real seconds a batch lasts (mean)")
    parser.add_argument("--heartbeat-s", type=float, default=20.0, help="real heartbeat interval (evalwf worker's)")
    parser.add_argument("--speedup", type=float, default=10.0, help="time compression of the emulated workers")
    parser.add_argument("--window-s", type=float, default=120.0, help="measured seconds per worker count (>= 60)")
    parser.add_argument("--active", type=int, default=0, help="batches the status rounds ask about (0: all queued)")
    parser.add_argument("--idle-s", type=float, default=15.0, help="idle submitter window measured")
    parser.add_argument("--queue-timeout", type=float, default=600.0)
    parser.add_argument("--dry-run-sizes", type=_ints, default=[10_000, 50_000], help="batches for snakemake -n")
    parser.add_argument("--dry-run-timeout", type=float, default=900.0)
    parser.add_argument("--skip", choices=["queue", "dry-run"], action="append", default=[])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep-logs", type=Path, help="copy the server's and the submitter's logs into this folder")
    args = parser.parse_args()
    try:
        specs = window_specs(args.workers, args.speedup)
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    pacing = Pacing(args.batch_s, args.heartbeat_s, args.speedup)
    machine = f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, load average {load_line()}"
    print(
        f"queue ceiling: {args.tasks} batches, workers {args.workers} x speedup {args.speedup} (batch {args.batch_s}"
        f" s -> {pacing.emulated_batch_s:.1f} s, heartbeat {args.heartbeat_s} s -> {pacing.emulated_heartbeat_s:.1f}"
        f" s), {args.window_s:.0f} s each; {machine}",
        flush=True,
    )
    results: dict[str, Any] = {"machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
                               "pacing": asdict(pacing)}  # fmt: skip
    started = time.time()
    if "queue" not in args.skip:
        with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as tmp:
            workdir = Path(tmp)
            results["queue"] = queue_campaign(workdir, args.tasks, args.idle_s, args.queue_timeout)
            print(json.dumps({"queue": results["queue"]}, indent=1), flush=True)
            results["windows"] = []
            for spec in specs:
                cap = args.active or results["queue"]["batches"]
                paced = Pacing(args.batch_s, args.heartbeat_s, spec.speedup)
                window = workers_window(workdir, spec.workers, spec.idle, paced, args.window_s, cap)
                results["windows"].append(window)
                print(json.dumps({"window": window}, indent=1, default=str), flush=True)
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for name in (".labtasker/server.log", "submitter.log"):
                    shutil.copy(workdir / name, args.keep_logs / Path(name).name)
    if "dry-run" not in args.skip:
        results["dry_runs"] = []
        for size in args.dry_run_sizes:
            results["dry_runs"].append(dry_run(size, args.dry_run_timeout))
            print(json.dumps({"dry_run": results["dry_runs"][-1]}, indent=1), flush=True)
    results["wall_s"] = time.time() - started
    print(f"benchmark wall time {results['wall_s']:.0f} s; load average {load_line()} at the end", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a client per emulated worker: a socket each
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    main()
