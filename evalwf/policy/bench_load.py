"""Load on a policy server as K job slots put it: K client processes, each sending a benchmark's requests back to
back (no simulator time between them) for a fixed time, each request tagged with its own episode and step exactly as
a job step tags it (evalwf.policy.episode_identity.TaggedPolicy). What `evalwf policy bench` measures per K.

Separate processes, not threads: a job slot is its own process, and one Python process cannot serialise K requests'
msgpack frames in parallel (the GIL would make the client the bottleneck of a fast policy).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from dataclasses import dataclass
from typing import Any

from evalwf.policy.client import PolicyClient
from evalwf.policy.episode_identity import EpisodeTag
from evalwf.policy.wire import Message


@dataclass(frozen=True)
class RequestSource:
    """The task whose requests the bench sends (the campaign's first task of the benchmark): the episode key's
    benchmark, suite and task. Its episodes' seeds are their indices (the bench runs no manifest's episodes)."""

    benchmark: str
    suite: str
    task: str


@dataclass(frozen=True)
class LoadResult:
    """What K concurrent clients measured: replies within the measured window, their round-trip latencies and the
    batch sizes the server reported (server_timing.batch_size; empty where the server reports none)."""

    slots: int
    seconds: float
    latencies_ms: tuple[float, ...]
    batch_sizes: tuple[int, ...]

    @property
    def obs_per_s(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds > 0 else 0.0

    def latency_quantile_ms(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def mean_batch(self) -> float | None:
        return statistics.fmean(self.batch_sizes) if self.batch_sizes else None


def tagged_request(source: RequestSource, episode: int, step: int, observation: Message) -> Message:
    """The request a job step sends for (episode, step): the benchmark's observation plus its episode key, built by
    the job step's own TaggedPolicy."""
    captured: list[Message] = []

    class _Capture:
        def infer(self, request: Message) -> Message:
            captured.append(request)
            return {}

    tag = EpisodeTag(source.benchmark, source.suite, source.task, episode, seed=episode, step=step)
    tag.policy(_Capture()).infer(observation)
    return captured[0]


def _client(
    endpoint: str,
    index: int,
    source: RequestSource,
    observation: Message,
    seconds: float,
    timeout_s: float,
    start: Any,
    results: Any,
) -> None:
    """One slot: warm up (one request, outside the window), wait for the others, then send back to back."""
    try:
        with PolicyClient(endpoint, connect_timeout_s=timeout_s, call_timeout_s=timeout_s) as client:
            client.infer(tagged_request(source, index, 0, observation))
            start.wait(timeout_s)
            begin = time.monotonic()
            deadline = begin + seconds
            latencies, batches, step = [], [], 1
            while time.monotonic() < deadline:
                sent = time.monotonic()
                reply = client.infer(tagged_request(source, index, step, observation))
                latencies.append(1000 * (time.monotonic() - sent))
                batch = (reply.get("server_timing") or {}).get("batch_size") if isinstance(reply, dict) else None
                if isinstance(batch, int):
                    batches.append(batch)
                step += 1
            results.put((index, time.monotonic() - begin, latencies, batches, None))
    except Exception as error:  # reported by the parent, naming the slot
        results.put((index, 0.0, [], [], f"{type(error).__name__}: {error}"))


def drive(
    endpoint: str,
    slots: int,
    source: RequestSource,
    observation: Message,
    seconds: float,
    timeout_s: float = 120.0,
) -> LoadResult:
    """`slots` client processes against `endpoint` for `seconds` each; RuntimeError naming the slot that failed."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(slots)
    results = context.Queue()
    processes = [
        context.Process(
            target=_client,
            args=(endpoint, index, source, observation, seconds, timeout_s, start, results),
            daemon=True,
        )
        for index in range(slots)
    ]
    for process in processes:
        process.start()
    gathered = []
    try:
        for _ in processes:
            gathered.append(results.get(timeout=timeout_s * 2 + seconds + 60))
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
    errors = [f"slot {index}: {error}" for index, _, _, _, error in gathered if error]
    if errors:
        raise RuntimeError(f"{len(errors)} of {slots} bench clients failed: " + "; ".join(errors))
    return LoadResult(
        slots=slots,
        seconds=max(elapsed for _, elapsed, _, _, _ in gathered),
        latencies_ms=tuple(latency for _, _, latencies, _, _ in gathered for latency in latencies),
        batch_sizes=tuple(batch for _, _, _, batches, _ in gathered for batch in batches),
    )
