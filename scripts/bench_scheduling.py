"""Scheduling benchmark: real campaigns through the real Labtasker server, real Snakemake and W real
workers, with stand-in episodes whose durations follow RoboTwin's step limits (a long tail).

    python scripts/bench_scheduling.py [--workers 4] [--episodes 12] [--batch-sizes 0 6 3 auto] [--json out.json]
    python scripts/bench_scheduling.py --scale 1400 [--json out.json]     # submit / poll / cancel at 1400 tasks

Campaign mode prints one row per (jobs = whole tasks, batches of B episodes, or `auto`: `batch_size: {auto: {workers:
W}}`, evalwf.plan.batch_sizes, sized for the benchmark's W workers) x (fifo | longest-first): span
(first batch submitted -> last batch noticed by Snakemake), summed work (the batches' duration_s), efficiency =
work / (W x span), the ideal bound max(work / W, longest unit) and span / bound, and the median per-batch time
split into submit -> claim (queue wait) -> job step running (start-up: Snakemake job step, simulator interpreter,
policy handshake) -> evaluation -> finished (job step exit, output check, report) -> noticed (the submitter's
"Finished jobid" line), the median over the workers of first submission -> their first evaluation running ("first":
what a worker does once, the same for any batching; the workers are started with the campaign's --configfile, as
docs/cluster.md recommends, so that their node checks and policy server start come before the campaign, unless
--workers-without-config) and the spread of the workers' last finishes
("tail": what batch sizes change); then where the workers' time went (worker_time: before the first claim, job
step start, evaluation, end, between batches, after the last) and each campaign's batches in a model of its measured
fixed costs (fixed_cost_model) next to that model's ceiling with no dispatch and no tail, which no batch plan can beat;
then a projection of the full campaigns (LIBERO 400 + RoboTwin 1000 batches, evalwf.plan.cost) to 8, 32 and 256 GPUs
with the measured dispatch overhead, as shipped (batches of 5) and with `auto` batch sizes for that many GPUs (and any
--projection-sizes), its assumptions printed, and what limits the finest plan (one episode per batch) there with one
assumption removed at a time (finest_limits).

Scale mode queues N batch tasks with no worker, measures the time to queue them, idle status rounds (bytes and
CPU-s on each side), the idle submitter's CPU, then Ctrl-C (time to exit, every queued task cancelled), and a
rerun interrupted by two Ctrl-C (nothing left that a worker could claim).

Sized for a 2-core machine: sleep-dominated stand-in steps, so the CPUs are not the bottleneck.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalwf.contract import CLIENT_SOCKET_ENV, CLIENT_URL_ENV  # noqa: E402
from evalwf.plan.cost import expected_batch_cost, span_lower_bound  # noqa: E402
from evalwf.queue.embedded_server import ensure_embedded_server, server_status, stop_embedded_server  # noqa: E402

# Stand-in tasks and the RoboTwin step limits they stand for (task_config/_eval_step_limit.yml: most tasks 400-700
# steps, a few 1200-1700): seconds per step scaled so that an episode takes limit x SCALE seconds.
MIX = {
    "alpha": {"reach": 400, "push": 400, "stack": 500, "slide": 700},
    "beta": {"open": 900, "close": 1200, "pour": 1700},
}
STEPS = 10  # steps per episode (every episode fails, so it runs its step limit, as a failing RoboTwin episode does)


class MedianParts(TypedDict):
    """Median seconds per batch of each part of its way through the queue."""

    submit_to_claim: float
    claim_to_running: float
    running: float
    running_to_finished: float
    finished_to_noticed: float


class WorkerTime(TypedDict):
    """Where the workers' time between the first submission and the span's end went, in worker-seconds summed over
    the workers (they add up to workers x span): what efficiency loses, part by part."""

    before_first_claim: float  # first submission -> the worker's first claim (submission order, polling)
    start: float  # claim -> evaluation running (job step start-up; a first batch also starts the policy server)
    evaluation: float  # evaluation running -> ended (the batch records' times)
    end: float  # evaluation ended -> task finished (job step exit, output check, report)
    between: float  # task finished -> the same worker's next claim
    after_last: float  # the worker's last task finished -> span end (the tail, and Snakemake noticing the last one)


class Overhead(TypedDict):
    median: float
    mean: float


class CampaignResult(TypedDict):
    """One measured campaign (a row of the printed table, an entry of --json's "campaigns")."""

    jobs: str
    mode: str
    workers: int
    units: int
    span_s: float
    work_s: float
    efficiency: float
    bound_s: float
    span_over_bound: float
    longest_unit_s: float
    median_s: MedianParts
    dispatch_overhead_s: Overhead
    submitter_wall_s: float
    first_running_s: float  # median over the workers: first submission -> their first evaluation running
    tail_spread_s: float  # the workers' last batches finished within this many seconds of each other
    worker_time_s: WorkerTime
    modelled_efficiency: float  # this campaign's batches in fixed_cost_model with its measured fixed costs
    ceiling_efficiency: float  # the same with no dispatch and no tail: what no batch plan can beat here
    batches: list[dict[str, float | str]]  # per batch: its times (seconds since the first submission), GPU, episodes


class Efficiencies(TypedDict):
    """Parallel efficiency (work / (GPUs x span)) over the simulated trials."""

    fifo_median: float
    fifo_worst: float
    longest_first_median: float
    longest_first_worst: float


class PlanEfficiency(TypedDict):
    """One batch plan of the full campaigns, longest-first on N GPUs, over the simulated trials."""

    batches: int
    smallest_batch_s: float  # expected cost of its shortest and longest batch
    largest_batch_s: float
    longest_first_median: float
    longest_first_worst: float


class FinestLimits(TypedDict):
    """One episode per batch on N GPUs, longest-first median: as projected and with one assumption removed at a time
    (finest_limits); a GPU's expected share of the work against the shortest unit."""

    as_projected: float
    no_dispatch_overhead: float
    no_variation: float  # actual = expected
    ordered_by_actual: float  # longest-first by the actual durations: known to no plan, a bound
    share_per_gpu_s: float
    shortest_unit_s: float


PROJECTED_GPUS = (8, 32, 256)

# keys as --json has always written them ("8_gpus" is no identifier); "by_plan": GPUs -> plan -> efficiency
Projection = TypedDict(
    "Projection",
    {
        "batches": int,
        "gpu_hours": float,
        "per_batch_overhead_s": float,
        "assumptions": list[str],
        "8_gpus": Efficiencies,
        "32_gpus": Efficiencies,
        "256_gpus": Efficiencies,
        "by_plan": dict[str, dict[str, PlanEfficiency]],
        "auto_planned_for": dict[str, dict[str, float]],  # planned workers -> GPUs run on -> longest-first median
        "finest_limits": dict[str, FinestLimits],  # GPUs -> what limits one episode per batch there
    },
    total=False,
)


def _ts(value: Any) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


BatchSize = int | dict[str, dict[str, int | None]]  # a number, or {auto: {workers, min, max}} (config.schema.yaml)


def batch_size_setting(size: str, workers: int, auto_min: int, auto_max: int | None) -> BatchSize:
    """--batch-sizes' word as the config's batch_size: a number, or `auto` sized for these workers."""
    return {"auto": {"workers": workers, "min": auto_min, "max": auto_max}} if size == "auto" else int(size)


def campaign_config(workdir: Path, cache: Path, episodes: int, batch_size: BatchSize, step_scale: float) -> Path:
    step_time = {task: limit * step_scale / STEPS for tasks in MIX.values() for task, limit in tasks.items()}
    config = {
        "run": "sched",
        "results_dir": str(workdir / "results"),
        "manifest_cache": str(cache),
        "policy": {
            "name": "standin-policy",
            "command": "{python} -m benchmarks.standin.policy_server --port {port}",
            "startup_timeout_s": 60,
        },
        "benchmarks": {
            "standin": {
                "suites": {suite: list(tasks) for suite, tasks in MIX.items()},
                "episodes_per_task": episodes,
                "batch_size": batch_size,
                "max_steps": STEPS,
                "replan_steps": STEPS,
                "tolerance": 1e-9,
                "step_time_s": {"default": 0.0, "tasks": step_time},
            }
        },
    }
    path = workdir / "campaign.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def embedded_env() -> dict[str, str]:
    """Workers and submitters of the workflow directory find its embedded server (on its socket) themselves."""
    return {k: v for k, v in os.environ.items() if k not in (CLIENT_URL_ENV, CLIENT_SOCKET_ENV)}


def snakemake_argv(workdir: Path, config: Path, *extra: str) -> list[str]:
    return [
        *[sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile")],
        *["--directory", str(workdir), "--configfile", str(config), *extra],
    ]


def build_manifests(workdir: Path, config: Path) -> None:
    argv = snakemake_argv(workdir, config, "--profile", str(REPO / "profiles" / "local"), "--until", "plan_manifest")
    done = subprocess.run([*argv, "--cores", "1"], cwd=workdir, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"building manifests failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")


class StampedRun:
    """A subprocess whose output lines are stamped with the time they arrive."""

    def __init__(self, argv: list[str], cwd: Path, log: Path, env: dict[str, str]):
        self.lines: list[tuple[float, str]] = []
        self.started = time.time()
        self.process = subprocess.Popen(
            argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
        )
        self.log = open(log, "w")  # noqa: SIM115
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            now = time.time()
            self.lines.append((now, line.rstrip("\n")))
            self.log.write(f"{now:.3f} {line}")
        self.log.flush()

    def wait(self, timeout: float | None = None) -> int:
        code = self.process.wait(timeout)
        self.reader.join(10)
        return code

    def first(self, text: str) -> float | None:
        return next((t for t, line in list(self.lines) if text in line), None)


def noticed_times(run: StampedRun) -> dict[str, float]:
    """task id -> when the submitter logged its job as finished."""
    job_task, noticed = {}, {}
    for stamp, line in run.lines:
        if line.startswith("[labtasker] job ") and " -> task " in line:
            jobid = line.split()[2]
            job_task[jobid] = line.split(" -> task ")[1].split(":")[0]
        elif line.startswith("Finished jobid: "):
            jobid = line.split()[2]
            if jobid in job_task:
                noticed[job_task[jobid]] = stamp
    return noticed


def all_tasks(client: Any) -> list[Any]:
    tasks, cursor = [], None
    while True:
        page = client.list_tasks(limit=1000, cursor=cursor)
        tasks += page.items
        cursor = page.next_cursor
        if not cursor or not page.items:
            return tasks


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def worker_time(lanes: list[list[dict[str, float]]], workers: int, first: float, span_end: float) -> WorkerTime:
    """Each worker's span, first submission -> `span_end`, cut at its batches' claim, evaluation start and end and
    finish times (`lanes`: each worker's batches); a worker that ran no batch idles its whole span (after_last)."""
    parts: WorkerTime = {
        "before_first_claim": 0.0,
        "start": 0.0,
        "evaluation": 0.0,
        "end": 0.0,
        "between": 0.0,
        "after_last": (workers - len(lanes)) * (span_end - first),
    }
    for lane in lanes:
        batches = sorted(lane, key=lambda r: r["claimed"])
        parts["before_first_claim"] += batches[0]["claimed"] - first
        for previous, batch in zip([None, *batches[:-1]], batches, strict=True):
            if previous is not None:
                parts["between"] += batch["claimed"] - previous["finished"]
            parts["start"] += batch["step_started"] - batch["claimed"]
            parts["evaluation"] += batch["step_finished"] - batch["step_started"]
            parts["end"] += batch["finished"] - batch["step_finished"]
        parts["after_last"] += span_end - batches[-1]["finished"]
    return parts


def fixed_cost_model(work: list[float], workers: int, first: float, per_batch: float, notice: float) -> float:
    """Efficiency of longest-first over these batch durations when every worker starts its first evaluation
    `first` seconds after the first submission, each batch costs `per_batch` on its worker besides its work, and
    the last one is noticed `notice` seconds after it finished: the measured fixed costs, without the queue."""
    free = [first] * workers
    for seconds in sorted(work, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + seconds + per_batch)
    return sum(work) / (workers * (max(free) + notice))


def run_campaign(args: argparse.Namespace, cache: Path, size: str, mode: str) -> CampaignResult:

    whole = size == "0"
    batch_size = batch_size_setting(size, args.workers, args.auto_min, args.auto_max)
    with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:
        workdir = Path(tmp)
        config = campaign_config(workdir, cache, args.episodes, args.episodes if whole else batch_size, args.scale_s)
        build_manifests(workdir, config)
        endpoint = ensure_embedded_server(workdir, log=lambda _: None)
        gpus = ",".join(str(i) for i in range(args.workers))
        worker_argv = [
            *[sys.executable, "-m", "evalwf.worker.main", "--gpus", gpus, "--idle-timeout", "0"],
            *["--poll-max", str(args.poll_max), "--allow-workflow", str(workdir), "--allow-workflow", str(REPO)],
            *([] if args.workers_without_config else ["--configfile", str(config)]),
        ]
        with open(workdir / "workers.log", "wb") as out:
            env = embedded_env()
            workers = subprocess.Popen(worker_argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            time.sleep(
                args.warmup_s
            )  # the workers are up, polling and warm before the campaign starts, as on a cluster
            run = StampedRun(
                snakemake_argv(
                    workdir,
                    config,
                    *["--profile", str(REPO / "profiles" / "labtasker"), "--labtasker-allow-workflow", str(REPO)],
                    *["--labtasker-scheduling", mode, "--seconds-between-status-checks", str(args.status_every)],
                ),
                workdir,
                workdir / "submitter.log",
                env,
            )
            code = run.wait(args.campaign_timeout)
            if code:
                raise SystemExit(f"campaign failed ({code}):\n" + "\n".join(line for _, line in run.lines[-60:]))
            with endpoint.client("evalwf") as client:
                tasks = [t for t in all_tasks(client) if t.name.startswith("evaluate_batch")]
        finally:
            workers.send_signal(signal.SIGTERM)
            try:
                workers.wait(60)
            except subprocess.TimeoutExpired:
                workers.kill()
            stop_embedded_server(workdir / ".labtasker")
        noticed = noticed_times(run)
        rows = []
        for task in tasks:
            output = Path(workdir, task.args["outputs"][0])
            result = json.loads(output.read_text())
            rows.append(
                {
                    "created": _ts(task.created_at),
                    "claimed": _ts(task.started_at),
                    "step_started": _ts(result["started_at"]),
                    "step_finished": _ts(result["finished_at"]),
                    "finished": _ts(task.finished_at),
                    "noticed": noticed.get(task.id, float("nan")),
                    "work": float(result["duration_s"]),
                    "episodes": len(result["episodes"]),
                    "gpu": str((result.get("worker") or {}).get("gpu")),
                }
            )
    first = min(r["created"] for r in rows)
    lanes: dict[str, list[dict[str, Any]]] = {}  # per worker (GPU): its batches
    for r in rows:
        lanes.setdefault(str(r["gpu"]), []).append(r)
    ends = [max(r["finished"] for r in lane) for lane in lanes.values()]
    span = max(r["noticed"] for r in rows if r["noticed"] == r["noticed"]) - first
    work = sum(r["work"] for r in rows)
    bound = span_lower_bound([r["work"] for r in rows], args.workers)
    first_running = median([min(r["step_started"] for r in lane) - first for lane in lanes.values()])
    ovh = median([r["finished"] - r["claimed"] - r["work"] for r in rows])
    notice = median([r["noticed"] - r["finished"] for r in rows if r["noticed"] == r["noticed"]])
    return {
        "jobs": "whole tasks" if whole else f"batches of {size}" if size != "auto" else f"auto ({args.workers} w)",
        "mode": mode,
        "workers": args.workers,
        "units": len(rows),
        "span_s": span,
        "work_s": work,
        "efficiency": work / (args.workers * span),
        "bound_s": bound,
        "span_over_bound": span / bound,
        "longest_unit_s": max(r["work"] for r in rows),
        "median_s": {
            "submit_to_claim": median([r["claimed"] - r["created"] for r in rows]),
            "claim_to_running": median([r["step_started"] - r["claimed"] for r in rows]),
            "running": median([r["work"] for r in rows]),
            "running_to_finished": median([r["finished"] - r["step_finished"] for r in rows]),
            "finished_to_noticed": median([r["noticed"] - r["finished"] for r in rows]),
        },
        "dispatch_overhead_s": {
            "median": median([r["finished"] - r["claimed"] - r["work"] for r in rows]),
            "mean": statistics.fmean([r["finished"] - r["claimed"] - r["work"] for r in rows]),
        },
        "submitter_wall_s": run.lines[-1][0] - run.started if run.lines else float("nan"),
        "first_running_s": first_running,
        "tail_spread_s": max(ends) - min(ends),
        "worker_time_s": worker_time(list(lanes.values()), args.workers, first, first + span),
        "modelled_efficiency": fixed_cost_model([r["work"] for r in rows], args.workers, first_running, ovh, notice),
        "ceiling_efficiency": fixed_cost_model(
            [work / args.workers] * args.workers, args.workers, first_running, 0.0, notice
        ),
        "batches": [
            {
                key: value - first if isinstance(value, float) and key not in ("work",) else value
                for key, value in r.items()
            }
            for r in sorted(rows, key=lambda r: r["claimed"])
        ],
    }


# -- projection --------------------------------------------------------------------------------------------------


def simulate(durations: list[float], order: list[int], workers: int, overhead: float) -> float:
    """Span of list scheduling in `order` (a free worker takes the next unit), each unit + overhead."""
    free = [0.0] * workers
    for index in order:
        heapq.heappush(free, heapq.heappop(free) + durations[index] + overhead)
    return max(free)


SHIPPED = [REPO / "config" / name for name in ("libero.yaml", "robotwin.yaml", "policies/standin.yaml")]


def priced_batches(batch_size: BatchSize | None, prices_from: Path) -> tuple[list[float], set[str]]:
    """Expected seconds of every batch of the full campaigns, with every benchmark's batch_size replaced by
    `batch_size` (None: as shipped), priced as `evalwf plan` prices them with `prices_from` as the results
    directory (its batch records measure; none there: the documented figures), and the bases of the prices."""
    from evalwf.plan.campaign import Campaign
    from evalwf.plan.config import load_config
    from evalwf.plan.cost import CostModel

    overrides: dict[str, Any] = {"results_dir": str(prices_from)}
    if batch_size is not None:
        overrides["benchmarks"] = {name: {"batch_size": batch_size} for name in ("libero", "robotwin")}
    campaign = Campaign(load_config(*SHIPPED, overrides=overrides))
    expected: list[float] = []
    bases: set[str] = set()
    for member in campaign.policy_campaigns():
        model = CostModel.measure(member)
        expected += [expected_batch_cost(model, batch) for batch in member.batches()]
        bases |= {model.basis(batch.ref) for batch in member.batches()}
    return expected, bases


def longest_first(
    expected: list[float],
    gpus: int,
    per_batch: float,
    rng: random.Random,
    trials: int,
    shortest_factor: float = 0.5,
    by_actual: bool = False,
) -> list[float]:
    """Efficiency of longest-first (by expected cost; with `by_actual` by the actual durations, which no plan
    knows) over `trials` draws of the actual durations, expected x U[shortest_factor, 1]."""
    by_cost = sorted(range(len(expected)), key=lambda i: -expected[i])
    out = []
    for _ in range(trials):
        actual = [cost * rng.uniform(shortest_factor, 1.0) for cost in expected]
        order = sorted(range(len(actual)), key=lambda i: -actual[i]) if by_actual else by_cost
        out.append(sum(actual) / (gpus * simulate(actual, order, gpus, per_batch)))
    return out


def finest_limits(costs: list[float], gpus: int, per_batch: float, seed: int, trials: int) -> FinestLimits:
    """The finest plan (one episode per batch) with one of the projection's assumptions removed at a time: what
    still limits its efficiency once no batch size is left to change."""

    def median_of(**options: Any) -> float:
        runs = longest_first(costs, gpus, options.pop("per_batch", per_batch), random.Random(seed), trials, **options)
        return statistics.median(runs)

    return {
        "as_projected": median_of(),
        "no_dispatch_overhead": median_of(per_batch=0.0),
        "no_variation": median_of(shortest_factor=1.0),
        "ordered_by_actual": median_of(by_actual=True),
        "share_per_gpu_s": sum(costs) / gpus,
        "shortest_unit_s": min(costs),
    }


def projection(
    overhead: float,
    claim_gap: float,
    sizes: tuple[int, ...] = (),
    auto_bounds: tuple[int, int | None] = (1, None),
    seed: int = 13,
    trials: int = 20,
    prices_from: Path | None = None,
) -> Projection:
    """`prices_from` None: priced with no batch record (the documented figures, as on a fresh checkout), whatever
    lies under this checkout's results/; a directory: priced from its records (`--prices-from results`, as `evalwf
    plan`). Every plan is priced once, then simulated on each GPU count."""
    with tempfile.TemporaryDirectory(prefix="bench-prices-") as empty:
        source = prices_from or Path(empty)
        expected, bases = priced_batches(None, source)
        auto_plans = {
            gpus: priced_batches(batch_size_setting("auto", gpus, *auto_bounds), source)[0] for gpus in PROJECTED_GPUS
        }
        finest = priced_batches(1, source)[0]
        sized = {f"batches of {size}": priced_batches(size, source)[0] for size in sizes}
    records = f"the batch records under {prices_from}" if prices_from else "no batch record"
    rng = random.Random(seed)
    per_batch = overhead + claim_gap
    out: Projection = {
        "batches": len(expected),
        "gpu_hours": sum(expected) / 3600,
        "per_batch_overhead_s": per_batch,
        "assumptions": [
            f"{len(expected)} batches of config/libero.yaml + config/robotwin.yaml (+ policies/standin.yaml); expected "
            f"cost = evalwf.plan.cost's, as `evalwf plan` prices them from {records} (priced by: "
            f"{', '.join(sorted(bases))})",
            "actual duration = expected x a factor drawn uniformly from [0.5, 1.0] per batch (episodes that succeed "
            "stop before the step limit); the priority is the expected cost (an upper bound), not the actual one",
            f"each batch occupies its worker for its duration + {overhead:.2f} s measured dispatch overhead "
            f"(median over the measured campaigns: claim -> finished minus evaluation) + {claim_gap:.2f} s claim gap "
            "(assumed: half the workers' --poll-max, the mean pause before an idle worker asks again)",
            "one worker per GPU, all workers present from the start, no failures or retries; fifo = a random "
            f"submission order per trial ({trials} trials: median and worst), longest-first = by expected cost",
            "by plan: the same campaigns with every benchmark's batch_size replaced (auto: {auto: {workers: <GPUs>, "
            f"min: {auto_bounds[0]}, max: {auto_bounds[1]}}}}}, evalwf.plan.batch_sizes), longest-first, a generator "
            "seeded alike per plan",
        ],
        "by_plan": {},
    }
    out["auto_planned_for"] = {
        str(planned): {
            str(gpus): statistics.median(longest_first(costs, gpus, per_batch, random.Random(seed + gpus), trials))
            for gpus in PROJECTED_GPUS
        }
        for planned, costs in auto_plans.items()
    }
    out["finest_limits"] = {
        str(gpus): finest_limits(finest, gpus, per_batch, seed + gpus, trials) for gpus in PROJECTED_GPUS
    }
    for gpus in PROJECTED_GPUS:
        fifo = []
        for _ in range(trials):
            actual = [cost * rng.uniform(0.5, 1.0) for cost in expected]
            order = list(range(len(actual)))
            rng.shuffle(order)
            fifo.append(sum(actual) / (gpus * simulate(actual, order, gpus, per_batch)))
        longest = longest_first(expected, gpus, per_batch, random.Random(seed + gpus), trials)
        out[f"{gpus}_gpus"] = {  # type: ignore[literal-required]
            "fifo_median": statistics.median(fifo),
            "fifo_worst": min(fifo),
            "longest_first_median": statistics.median(longest),
            "longest_first_worst": min(longest),
        }
        plans = {"as shipped (5)": expected, **sized, f"auto ({gpus} workers)": auto_plans[gpus]}
        out["by_plan"][str(gpus)] = {
            label: {
                "batches": len(costs),
                "smallest_batch_s": min(costs),
                "largest_batch_s": max(costs),
                "longest_first_median": statistics.median(
                    effs := longest_first(costs, gpus, per_batch, random.Random(seed + gpus), trials)
                ),
                "longest_first_worst": min(effs),
            }
            for label, costs in plans.items()
        }
    return out


# -- scale -------------------------------------------------------------------------------------------------------


class CountingHttp:
    """Bytes of every response a Labtasker client receives."""

    def __init__(self, client: Any):
        self.bytes = 0
        inner = client._http.request

        def request(*args: Any, **kwargs: Any) -> Any:
            response = inner(*args, **kwargs)
            self.bytes += len(response.content)
            return response

        client._http.request = request


def wait_count(client: Any, count: int, timeout: float, status: str | None = None) -> float | None:
    deadline = time.time() + timeout
    from labtasker import APIError

    while time.time() < deadline:
        with contextlib.suppress(APIError):  # the queue exists once the submitter has started
            if client.count_tasks(status=status) >= count:
                return time.time()
        time.sleep(0.2)
    return None


def run_scale(args: argparse.Namespace) -> dict[str, Any]:

    from evalwf.contract import campaign_key

    # this script benchmarks the plugin itself: its status rounds are what scale mode measures
    from snakemake_executor_plugin_labtasker.status_query import StatusPoller

    tasks_per = -(-args.scale // 7)
    total = tasks_per * 7
    out: dict[str, Any] = {"tasks": total}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = Path(tmp)
        config = campaign_config(workdir, workdir / "cache", tasks_per, 1, 0.0)
        build_manifests(workdir, config)
        endpoint = ensure_embedded_server(workdir, log=lambda _: None)
        server = psutil.Process(int(server_status(workdir / ".labtasker")["pid"]))
        argv = snakemake_argv(
            workdir, config, "--profile", str(REPO / "profiles" / "labtasker"), "--labtasker-allow-workflow", str(REPO)
        )
        env = embedded_env()
        client = endpoint.client("evalwf")
        run = StampedRun(argv, workdir, workdir / "submit1.log", env)
        try:
            queued = wait_count(client, total, 300)
            first = run.first("[labtasker] job ")
            out["queue_s_from_start"] = (queued or float("nan")) - run.started
            out["queue_s_from_first_submission"] = (queued or float("nan")) - (first or float("nan"))
            # idle: nothing changes; the submitter polls every seconds-between-status-checks
            submitter = psutil.Process(run.process.pid)
            time.sleep(3)
            c0, s0, t0 = submitter.cpu_times(), server.cpu_times(), time.time()
            time.sleep(args.idle_s)
            c1, s1, t1 = submitter.cpu_times(), server.cpu_times(), time.time()
            out["idle_submitter_core_pct"] = 100 * ((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0)
            out["idle_server_core_pct"] = 100 * ((s1.user + s1.system) - (s0.user + s0.system)) / (t1 - t0)
            # status rounds measured in this process against the same 1400 tasks
            probe = endpoint.client("evalwf")
            counter = CountingHttp(probe)
            ids = [t.id for t in all_tasks(client)]
            poller = StatusPoller(campaign_key(str(workdir)))
            rounds = []
            for index in range(4):
                before_bytes, cpu0, srv0 = counter.bytes, time.process_time(), server.cpu_times()
                poller.poll(probe, ids)
                srv1 = server.cpu_times()
                rounds.append(
                    {
                        "round": "first (by id)" if index == 0 else "idle",
                        "bytes": counter.bytes - before_bytes,
                        "client_cpu_s": time.process_time() - cpu0,
                        "server_cpu_s": (srv1.user + srv1.system) - (srv0.user + srv0.system),
                        "fetched": poller.last_fetched,
                    }
                )
                time.sleep(1.0)
            out["status_rounds"] = rounds
            # Ctrl-C with everything queued
            interrupted = time.time()
            run.process.send_signal(signal.SIGINT)
            run.wait(120)
            out["ctrl_c_exit_s"] = time.time() - interrupted
            out["after_ctrl_c"] = client.count_tasks(group_by=["status"]).model_dump(mode="json")
            # rerun (every task requeued), then two Ctrl-C in a row
            run = StampedRun(argv, workdir, workdir / "submit2.log", env)
            requeued = wait_count(client, total, 300, status="pending")
            out["requeue_s_from_start"] = (requeued or float("nan")) - run.started
            interrupted = time.time()
            run.process.send_signal(signal.SIGINT)
            time.sleep(0.5)
            with contextlib.suppress(ProcessLookupError):
                run.process.send_signal(signal.SIGINT)
            run.wait(120)
            out["double_ctrl_c_exit_s"] = time.time() - interrupted
            out["after_double_ctrl_c"] = client.count_tasks(group_by=["status"]).model_dump(mode="json")
            out["claimable_after_double_ctrl_c"] = sum(
                1 for t in all_tasks(client) if t.status == "pending" and "default" in t.routes
            )
        finally:
            if run.process.poll() is None:
                run.process.kill()
                run.wait(30)
            client.close()
            stop_embedded_server(workdir / ".labtasker")
    return out


# -- main --------------------------------------------------------------------------------------------------------


def print_campaigns(results: list[CampaignResult], header: bool = True) -> None:
    if header:
        print(
            f"{'jobs':<14} {'scheduling':<13} {'units':>5} {'span s':>7} {'work s':>7} {'eff':>5} {'bound s':>7} "
            f"{'span/bd':>7} | {'wait':>5} {'start':>5} {'run':>5} {'end':>5} {'notice':>6} | {'ovh med':>7} "
            f"{'first':>5} {'tail':>5}"
        )
    for r in results:
        m = r["median_s"]
        print(
            f"{r['jobs']:<14} {r['mode']:<13} {r['units']:>5} {r['span_s']:>7.1f} {r['work_s']:>7.1f} "
            f"{r['efficiency']:>5.2f} {r['bound_s']:>7.1f} {r['span_over_bound']:>7.2f} | "
            f"{m['submit_to_claim']:>5.1f} {m['claim_to_running']:>5.2f} {m['running']:>5.1f} "
            f"{m['running_to_finished']:>5.2f} {m['finished_to_noticed']:>6.2f} | "
            f"{r['dispatch_overhead_s']['median']:>7.2f} {r['first_running_s']:>5.1f} {r['tail_spread_s']:>5.1f}",
            flush=True,
        )


def print_worker_time(results: list[CampaignResult]) -> None:
    """Where the workers' time went: each part's share of workers x span (efficiency is about the evaluation's)."""
    names = list(WorkerTime.__annotations__)
    print(
        "\nwhere the workers' time went, share of workers x span: " + ", ".join(names) + "; then the efficiency of "
        "these batches modelled with the measured fixed costs (first, ovh med, notice: fixed_cost_model) and its "
        "ceiling with no dispatch and no tail"
    )
    for r in results:
        total = r["workers"] * r["span_s"]
        shares = "  ".join(f"{r['worker_time_s'][name] / total:6.3f}" for name in names)  # type: ignore[literal-required]
        print(
            f"  {r['jobs']:<14} {r['mode']:<13} {shares} | model {r['modelled_efficiency']:.3f} ceiling "
            f"{r['ceiling_efficiency']:.3f}"
        )


def print_projection(projected: Projection) -> None:
    print(
        f"\nprojection, full campaigns ({projected['batches']} batches, {projected['gpu_hours']:.0f} GPU-h expected),"
        f" {projected['per_batch_overhead_s']:.2f} s per batch:"
    )
    for gpus in PROJECTED_GPUS:
        p = projected[f"{gpus}_gpus"]  # type: ignore[literal-required]
        print(
            f"  {gpus:>3} GPUs: fifo median {p['fifo_median']:.3f} (worst {p['fifo_worst']:.3f}), longest-first "
            f"median {p['longest_first_median']:.3f} (worst {p['longest_first_worst']:.3f})"
        )
        for label, plan in projected["by_plan"][str(gpus)].items():
            print(
                f"        {label:<20} {plan['batches']:>5} batches ({plan['smallest_batch_s']:.0f}-"
                f"{plan['largest_batch_s']:.0f} s): longest-first median {plan['longest_first_median']:.3f} (worst "
                f"{plan['longest_first_worst']:.3f})"
            )
    print(
        "  auto planned for W workers, run on G GPUs (longest-first median): rows W, columns G " + str(PROJECTED_GPUS)
    )
    for planned, row in projected["auto_planned_for"].items():
        print(f"    W = {planned:>3}: " + "  ".join(f"{row[str(gpus)]:.3f}" for gpus in PROJECTED_GPUS))
    print("  one episode per batch, longest-first median: as projected / no dispatch overhead / no variation")
    print("  (actual = expected) / ordered by the actual durations (no plan knows them); a GPU's share, shortest unit")
    for gpus, limit in projected["finest_limits"].items():
        print(
            f"    {gpus:>3} GPUs: {limit['as_projected']:.4f} / {limit['no_dispatch_overhead']:.4f} / "
            f"{limit['no_variation']:.4f} / {limit['ordered_by_actual']:.4f}; share {limit['share_per_gpu_s']:.0f} s, "
            f"shortest unit {limit['shortest_unit_s']:.0f} s"
        )
    print("  assumptions:\n" + "\n".join(f"  - {line}" for line in projected["assumptions"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=12, help="episodes per stand-in task")
    parser.add_argument(
        "--batch-sizes", nargs="+", default=["0", "6", "3", "auto"], help="0 = one job per task; auto = batch_size auto"
    )
    parser.add_argument("--auto-min", type=int, default=1, help="auto: batch_size.auto.min")
    parser.add_argument("--auto-max", type=int, help="auto: batch_size.auto.max (default none)")
    parser.add_argument(
        "--projection-sizes",
        type=int,
        nargs="*",
        default=[6, 3, 1],
        help="fixed sizes projected next to auto (1: the finest split)",
    )
    parser.add_argument("--modes", nargs="+", default=["fifo", "longest-first"])
    parser.add_argument(
        "--warmup-s",
        type=float,
        default=2.0,
        help="seconds the workers run before the campaign is submitted (their spares import Snakemake meanwhile)",
    )
    parser.add_argument(
        "--workers-without-config",
        action="store_true",
        help="start the workers without the campaign's --configfile: each checks its node and starts the policy "
        "server at its first batch instead of at start",
    )
    parser.add_argument("--scale-s", type=float, default=0.004, help="episode seconds per RoboTwin step of limit")
    parser.add_argument("--poll-max", type=float, default=0.5, help="workers' longest idle pause between claims")
    parser.add_argument("--status-every", type=int, default=1, help="seconds between status checks")
    parser.add_argument("--campaign-timeout", type=float, default=900)
    parser.add_argument("--scale", type=int, default=0, help="scale mode: queue this many tasks (no workers)")
    parser.add_argument("--idle-s", type=float, default=20.0, help="scale mode: idle window measured")
    parser.add_argument(
        "--prices-from",
        type=Path,
        metavar="RESULTS_DIR",
        help="price the projection from the batch records in this results directory, as `evalwf plan` does "
        "(default: none, the documented figures, whatever this checkout's results/ holds)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--projection-only",
        type=float,
        metavar="OVERHEAD_S",
        help="run no campaign: only the projection of the full campaigns at this dispatch overhead per batch",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    machine = f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start"
    if args.scale:
        print(f"scale: {args.scale} batch tasks, no workers; {machine}", flush=True)
        result = run_scale(args)
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps({"machine": machine, "scale": result}, indent=2))
        return
    if args.projection_only is not None:
        print_projection(
            projection(
                args.projection_only,
                args.poll_max / 2,
                tuple(args.projection_sizes),
                (args.auto_min, args.auto_max),
                prices_from=args.prices_from,
            )
        )
        return
    episode = {task: limit * args.scale_s for tasks in MIX.values() for task, limit in tasks.items()}
    print(
        f"stand-in campaign: {sum(len(t) for t in MIX.values())} tasks x {args.episodes} episodes, episode seconds "
        + ", ".join(f"{task} {seconds:.1f}" for task, seconds in episode.items())
        + f" (RoboTwin step limit x {args.scale_s}); {args.workers} workers (--poll-max {args.poll_max}), status "
        f"checks every {args.status_every} s; {machine}",
        flush=True,
    )
    started = time.time()
    results: list[CampaignResult] = []
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
        for batch_size in args.batch_sizes:
            for mode in args.modes:
                results.append(run_campaign(args, Path(cache), batch_size, mode))
                print_campaigns(results[-1:], header=len(results) == 1)
    print(f"\nall campaigns, {args.workers} workers (medians per batch, seconds):")
    print_campaigns(results)
    print_worker_time(results)
    overhead = median([r["dispatch_overhead_s"]["median"] for r in results])
    projected = projection(
        overhead,
        args.poll_max / 2,
        tuple(args.projection_sizes),
        (args.auto_min, args.auto_max),
        prices_from=args.prices_from,
    )
    print_projection(projected)
    print(f"\nbenchmark wall time {time.time() - started:.0f} s", flush=True)
    if args.json:
        args.json.write_text(
            json.dumps({"machine": machine, "args": vars(args) | {"json": str(args.json)}, "campaigns": results,
                        "projection": projected}, indent=2, default=str)
        )  # fmt: skip


if __name__ == "__main__":
    main()
