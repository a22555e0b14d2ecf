"""What earlier batches measured, per benchmark and suite: the seconds an environment reset takes, the seconds a
step takes (simulator plus policy inference, as the worker ran them), how many of its step limit an episode used,
and the seconds a batch spends outside its episodes (environment creation, policy connection).

Read from every batch result file under the campaign's results_dir with the benchmark and suite (this run's and
earlier runs', any policy): the records hold each episode's steps and duration_s and the batch's duration_s, so
nothing new is recorded. An episode's duration is fitted as reset + steps x step time (least squares over the
episodes); where the episodes' step counts barely vary the two cannot be told apart and the reset is taken as 0
(the step time then carries it, which prices episodes of that length right).
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

RESULT_SCHEMA = "policy-eval.batch-result"  # evalwf/plan/batch_result.schema.json
MIN_EPISODES = 5  # fewer measured episodes of a suite say too little to price it by


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; values non-empty."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class SuiteTiming:
    """Measured figures of one benchmark suite; `_p90` the 90th percentiles, the others medians."""

    reset_s: float
    step_s: float
    step_s_p90: float
    steps_used: float  # median fraction of its step limit an episode ran (1.0: every episode ran to the limit)
    steps_used_p90: float
    setup_s: float  # per batch, outside its episodes
    setup_s_p90: float
    episodes: int
    runs: tuple[str, ...]


def fit(samples: list[tuple[int, float, int]], setups: list[float], runs: list[str]) -> SuiteTiming | None:
    """`samples`: (steps, duration_s, step limit) per episode; `setups`: per batch, the seconds outside episodes."""
    samples = [(steps, seconds, limit) for steps, seconds, limit in samples if steps > 0 and limit > 0]
    if len(samples) < MIN_EPISODES:
        return None
    steps = [float(s) for s, _, _ in samples]
    seconds = [d for _, d, _ in samples]
    mean_steps, mean_seconds = statistics.fmean(steps), statistics.fmean(seconds)
    spread = sum((s - mean_steps) ** 2 for s in steps)
    reset = 0.0
    if spread >= len(steps):  # step counts vary by more than one step on average: intercept and slope separate
        slope = sum((s - mean_steps) * (d - mean_seconds) for s, d in zip(steps, seconds, strict=True)) / spread
        reset = max(0.0, mean_seconds - slope * mean_steps)
    per_step = [max(0.0, d - reset) / s for s, d in zip(steps, seconds, strict=True)]
    used = [min(1.0, s / limit) for s, _, limit in samples]
    setups = [max(0.0, s) for s in setups] or [0.0]
    return SuiteTiming(
        reset_s=reset,
        step_s=quantile(per_step, 0.5),
        step_s_p90=quantile(per_step, 0.9),
        steps_used=quantile(used, 0.5),
        steps_used_p90=quantile(used, 0.9),
        setup_s=quantile(setups, 0.5),
        setup_s_p90=quantile(setups, 0.9),
        episodes=len(samples),
        runs=tuple(sorted(set(runs))),
    )


@dataclass(frozen=True)
class Dispatch:
    """Seconds a worker spends between one batch's end and its next batch's start (job step, policy server or
    its handshake, queue round trips), measured on consecutive batches of one run on one worker."""

    gap_s: float
    gap_s_p90: float
    gaps: int


def measure_dispatch(results_dir: Path, benchmarks: list[str]) -> Dispatch | None:
    """From every batch of `benchmarks` under results_dir: its run, worker (host, GPU, worker id) and times."""
    lanes: dict[tuple[str, ...], list[tuple[datetime, datetime]]] = {}
    for benchmark in benchmarks:
        for path in _batch_files(results_dir, benchmark, "*"):
            data = _read(path, benchmark, None)
            worker = data.get("worker") if data else None
            if not isinstance(worker, dict):
                continue
            try:
                span = datetime.fromisoformat(data["started_at"]), datetime.fromisoformat(data["finished_at"])
            except (KeyError, TypeError, ValueError):
                continue
            lane = (str(data.get("run")), *(str(worker.get(key)) for key in ("host", "gpu", "worker_id")))
            lanes.setdefault(lane, []).append(span)
    gaps = []
    for spans in lanes.values():
        spans.sort()
        gaps += [(b[0] - a[1]).total_seconds() for a, b in itertools.pairwise(spans)]
    gaps = [gap for gap in gaps if gap >= 0]  # overlapping: two slots of one worker name; not a gap
    if len(gaps) < MIN_EPISODES:
        return None
    return Dispatch(quantile(gaps, 0.5), quantile(gaps, 0.9), len(gaps))


def _batch_files(results_dir: Path, benchmark: str, suite: str) -> list[Path]:
    """One policy's layout (<run>/<benchmark>/...) and several policies' (<run>/<policy>/<benchmark>/...)."""
    tail = f"{benchmark}/batches/{suite}/*/*.json"
    return sorted({*results_dir.glob(f"*/{tail}"), *results_dir.glob(f"*/*/{tail}")})


def _read(path: Path, benchmark: str, suite: str | None) -> dict[str, Any] | None:
    """A batch result of the benchmark and suite, or None for anything else (unreadable, partial, foreign)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
        return None
    if data.get("benchmark") != benchmark or suite not in (None, data.get("suite")):
        return None
    if not isinstance(data.get("episodes"), list):
        return None
    return data


def measure_suites(
    results_dir: Path, suites: dict[tuple[str, str], dict[str, int]]
) -> dict[tuple[str, str], SuiteTiming]:
    """`suites`: (benchmark, suite) -> task -> its step limit (a task no longer in the config: the suite's
    largest). The timings of the suites with at least MIN_EPISODES measured episodes."""
    found: dict[tuple[str, str], SuiteTiming] = {}
    for (benchmark, suite), limits in suites.items():
        samples: list[tuple[int, float, int]] = []
        setups: list[float] = []
        runs: list[str] = []
        for path in _batch_files(results_dir, benchmark, suite):
            data = _read(path, benchmark, suite)
            if data is None:
                continue
            limit = limits.get(str(data.get("task")), max(limits.values()))
            episodes = [e for e in data["episodes"] if isinstance(e, dict)]
            try:
                batch = [(int(e["steps"]), float(e["duration_s"]), limit) for e in episodes]
                setup = float(data["duration_s"]) - sum(seconds for _, seconds, _ in batch)
            except (KeyError, TypeError, ValueError):
                continue
            samples += batch
            setups.append(setup)
            runs.append(str(data.get("run")))
        timing = fit(samples, setups, runs)
        if timing is not None:
            found[(benchmark, suite)] = timing
    return found
