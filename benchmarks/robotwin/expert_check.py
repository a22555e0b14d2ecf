"""Upstream's expert check of one seed, and the stream of verdicts in seed order: one env in this process
(sequential, as upstream's loop), or `workers` processes each with its own env, checking seeds ahead in parallel.

The check, as both upstream lines do it: setup_demo(now_ep_num, seed, is_test=True, **args) with render_freq 0,
play_once(), close_env(); UnStableError or any other exception rejects the seed, except one that says the check
itself could not run (check_failure: host or GPU memory, a device error, a missing file or module), which fails the
manifest; otherwise the seed is accepted when plan_success and check_success().

In parallel, verdicts are still handed out in seed order, each only once every smaller seed's is known, so the
accepted seeds are the first ones upstream's sequential loop accepts, whatever order the checks finish in (main's
own parallel mode instead gives its episode slots to the first accepted seeds to finish). It is used only where a
seed's verdict depends on the seed alone: not for the clutter-drift tasks under a cluttered table, whose hidden
state carries from setup to setup (docs/robotwin.md). Light core: runs in RoboTwin's interpreter (Python 3.10).
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from benchmarks.robotwin import expert_state
from benchmarks.robotwin.expert_state import EncodedValue
from evalwf.common.json_types import JsonObject

# Text of exceptions from torch, CUDA and Vulkan (SAPIEN's renderer) when the GPU, not the seed, is the problem.
GPU_FAILURE_MARKERS = (
    "outofmemory",
    "out of memory",
    "cuda error",
    "cudnn_status",
    "cublas_status",
    "erroroutofdevicememory",
    "errordevicelost",
)


def check_failure(error: BaseException) -> str | None:
    """What made the expert check itself fail (no verdict on the seed), naming the missing module or file or the
    GPU's error, or None for a rejection.

    Upstream's loop skips the seed on any exception. An exception the planner or the task raises for a seed is
    the expert's verdict; one from the machine (memory, GPU, files, imports) is not, and skipping on it would
    seal a seed set that depends on the machine's state, permanently (the manifest is cached)."""
    kind = type(error).__name__
    first = (str(error).strip().splitlines() or [""])[0]
    if isinstance(error, MemoryError):
        return f"out of host memory ({kind})"
    if isinstance(error, ImportError):
        return f"module {error.name or '?'} failed to import ({kind}: {first})"
    if isinstance(error, OSError):
        files = " -> ".join(repr(str(name)) for name in (error.filename, error.filename2) if name is not None)
        if files:
            what = "missing file" if isinstance(error, FileNotFoundError) else "file or device error on"
            return f"{what} {files} ({kind}: {error.strerror or first})"
        return f"an operating-system error ({kind}: {first})"
    for line in f"{kind}: {error}".splitlines():
        if any(marker in line.lower() for marker in GPU_FAILURE_MARKERS):
            return f"GPU error: {line.strip()}"
    return None


@dataclass(frozen=True)
class Verdict:
    """One seed's expert check. reason None: accepted. failure: the check itself could not run (the manifest
    fails naming it). Picklable: it comes back from a worker process."""

    seed: int
    reason: str | None = None
    episode_info: dict[str, Any] | None = None  # play_once's return, for an accepted seed
    state: dict[str, EncodedValue] | None = None  # expert_state.capture of the PLAY_ONCE_STATE attributes
    failure: str | None = None  # check_failure's text
    exception: str = ""  # the exception that rejected the seed or failed the check: "Type: message"
    log: str = ""  # what the check logged (the traceback of an exception that rejected the seed)


def _close_quietly(env: Any) -> str:
    try:
        env.close_env()
    except Exception as exc:  # upstream calls close_env after a failed setup too; it may fail itself
        return f"close_env after a failed expert check raised {type(exc).__name__}: {exc}\n"
    return ""


def check_seed(
    env: Any,
    args: JsonObject,
    seed: int,
    now_ep_num: int,
    unstable_error: type[BaseException],
    state_names: tuple[str, ...],
    where: str,
) -> Verdict:
    """Upstream's expert check of `seed` on `env` (args["render_freq"] set to 0 for it and restored)."""
    render_freq = args["render_freq"]
    args["render_freq"] = 0
    try:
        try:
            env.setup_demo(now_ep_num=now_ep_num, seed=seed, is_test=True, **args)
            episode_info = env.play_once()
            env.close_env()
        except unstable_error as exc:
            return Verdict(seed, reason=f"unstable: {exc}", log=_close_quietly(env))
        except Exception as exc:
            closed = _close_quietly(env)
            failure = check_failure(exc)
            if failure is not None:
                return Verdict(seed, failure=failure, exception=f"{type(exc).__name__}: {exc}", log=closed)
            trace = f"{where}: seed {seed} raised during the expert check\n{traceback.format_exc()}"
            return Verdict(seed, reason=f"error: {type(exc).__name__}: {exc}", log=closed + trace)
        if not (env.plan_success and env.check_success()):
            return Verdict(seed, reason="plan_failed" if not env.plan_success else "check_failed")
        # What play_once left on the env that check_success reads (PLAY_ONCE_STATE); upstream's policy episode
        # finds it there because the expert ran right before it. Batches restore it after setup_demo.
        state = expert_state.capture(env, state_names, f"{where}: seed {seed}") if state_names else None
        return Verdict(seed, episode_info=episode_info, state=state)
    finally:
        args["render_freq"] = render_freq


def sequential_verdicts(
    check: Callable[[int, int], Verdict], start: int, accepted_so_far: Callable[[], int]
) -> Iterator[Verdict]:
    """Seeds from `start`, each checked when the consumer asks for it (after it handled the one before, as
    upstream's loop: its policy setup of an accepted seed runs before the next check)."""
    seed = start
    while True:
        yield check(seed, accepted_so_far())
        seed += 1


@dataclass(frozen=True)
class CheckSpec:
    """What a worker process needs to build its own env (picklable)."""

    root: str
    protocol: str
    task: str
    task_config: str
    state_names: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class _CheckWorker:
    """What one expert check process holds for its life: the task's env and upstream's args for it."""

    spec: CheckSpec
    env: Any  # the checkout's task env (upstream's Base_Task subclass)
    args: JsonObject
    unstable: type[BaseException]


_WORKER: list[_CheckWorker] = []  # this process's, once _worker_start made it


def _worker_start(spec: CheckSpec) -> None:
    """In a worker process: the checkout imported and entered for good, one env of the task, a fresh process's
    clutter default."""
    from benchmarks.robotwin.checkout import RobotwinCheckout, set_clutter_xlim_default

    checkout = RobotwinCheckout(spec.root, spec.protocol)
    checkout.activated().__enter__()  # this process only runs checks: stay in the checkout's root
    env = checkout.make_env(spec.task)
    set_clutter_xlim_default(env)
    _WORKER.append(_CheckWorker(spec, env, checkout.eval_args(spec.task, spec.task_config), checkout.unstable_error()))


def _worker_check(seed: int, now_ep_num: int) -> Verdict:
    worker = _WORKER[0]
    return check_seed(
        worker.env, worker.args, seed, now_ep_num, worker.unstable, worker.spec.state_names, worker.spec.where
    )


def parallel_verdicts(
    spec: CheckSpec, start: int, limit: int, workers: int, accepted_so_far: Callable[[], int]
) -> Iterator[Verdict]:
    """Seeds start .. start+limit-1 checked by `workers` processes (each with its own env; at most 2 x workers
    seeds ahead of the consumer), handed out in seed order. now_ep_num of a check is the count of accepted seeds
    handed out when it was submitted (upstream uses it only to name data-saving folders; the manifest records the
    sequential values). Unchecked seeds are cancelled when the consumer stops."""
    context = multiprocessing.get_context("spawn")  # no fork of a process holding a simulator
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start, initargs=(spec,))
    pending: dict[int, Future[Verdict]] = {}
    submitted = start
    try:
        for seed in range(start, start + limit):
            while submitted < start + limit and len(pending) < 2 * workers:
                pending[submitted] = pool.submit(_worker_check, submitted, accepted_so_far())
                submitted += 1
            yield pending.pop(seed).result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
