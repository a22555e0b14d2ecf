"""Are a policy's actions the same served alone and in a batch? `evalwf policy bench --check-determinism`.

The same (episode, step) requests go to one server twice: one at a time from one client (every forward pass holds
one request), then from K concurrent clients (the server batches them). A policy whose arithmetic is item-wise and
whose noise comes from the per-request generator answers bitwise the same; one batched float32 matmul already
changes the last bits (another summation order in the BLAS kernel), which this reports as the largest difference.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from evalwf.policy.client import PolicyClient
from evalwf.policy.wire import Message

Key = tuple[int, int]  # (episode, step)


@dataclass(frozen=True)
class DeterminismReport:
    requests: int
    identical: int
    max_abs_diff: float
    max_rel_diff: float
    batched_mean: float | None  # mean batch size the server reported for the batched pass (None: not reported)

    @property
    def bitwise_identical(self) -> bool:
        return self.identical == self.requests

    def line(self) -> str:
        batches = f"mean batch {self.batched_mean:.2f}" if self.batched_mean is not None else "batch size not reported"
        verdict = "bitwise identical" if self.bitwise_identical else "DIFFERENT"
        return (
            f"determinism: {self.identical} of {self.requests} requests identical alone and batched ({batches}): "
            f"{verdict}; largest difference {self.max_abs_diff:.3g} absolute, {self.max_rel_diff:.3g} relative"
        )


def compare(
    alone: dict[Key, np.ndarray], batched: dict[Key, np.ndarray], batched_mean: float | None
) -> DeterminismReport:
    """Actions per (episode, step), served alone and batched; the same keys in both."""
    if alone.keys() != batched.keys():
        raise ValueError(f"the passes answered different requests: {sorted(alone.keys() ^ batched.keys())[:5]}")
    identical, max_abs, max_rel = 0, 0.0, 0.0
    for key, first in alone.items():
        a, b = np.asarray(first, np.float64), np.asarray(batched[key], np.float64)
        if a.shape != b.shape:
            max_abs = max_rel = float("inf")
            continue
        if np.array_equal(a, b):
            identical += 1
            continue
        diff = np.abs(a - b)
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / np.maximum(np.abs(a), np.finfo(np.float32).tiny)).max()))
    return DeterminismReport(len(alone), identical, max_abs, max_rel, batched_mean)


def _serve_keys(
    endpoint: str, keys: list[Key], request: Callable[[int, int], Message], timeout_s: float
) -> tuple[dict[Key, np.ndarray], list[int]]:
    answers: dict[Key, np.ndarray] = {}
    batches: list[int] = []
    with PolicyClient(endpoint, connect_timeout_s=timeout_s, call_timeout_s=timeout_s) as client:
        for episode, step in keys:
            reply = client.infer(request(episode, step))
            answers[(episode, step)] = np.asarray(reply["actions"])
            batch = (reply.get("server_timing") or {}).get("batch_size")
            if isinstance(batch, int):
                batches.append(batch)
    return answers, batches


def check_determinism(
    endpoint: str,
    request: Callable[[int, int], Message],
    slots: int,
    steps: int = 4,
    timeout_s: float = 120.0,
) -> DeterminismReport:
    """`request(episode, step)` builds the request of that episode and step; `slots` episodes x `steps` steps are
    served alone (one client), then by `slots` concurrent clients (one episode each, as job slots)."""
    keys = [(episode, step) for episode in range(slots) for step in range(steps)]
    alone, _ = _serve_keys(endpoint, keys, request, timeout_s)
    batched: dict[Key, np.ndarray] = {}
    batches: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(slots)

    def slot(episode: int) -> None:
        try:
            start.wait(timeout_s)
            answers, sizes = _serve_keys(endpoint, [k for k in keys if k[0] == episode], request, timeout_s)
        except Exception as error:  # named below
            with lock:
                errors.append(f"episode {episode}: {type(error).__name__}: {error}")
            return
        with lock:
            batched.update(answers)
            batches.extend(sizes)

    threads = [threading.Thread(target=slot, args=(episode,)) for episode in range(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError("determinism check failed: " + "; ".join(errors))
    return compare(alone, batched, float(np.mean(batches)) if batches else None)
