"""A deterministic stand-in policy server speaking the openpi websocket protocol.

Wire format as openpi's websocket_policy_server: on connect the server sends a msgpack metadata dict; each
binary frame is an observation, answered with {"actions": [H, A], "server_timing": {...}}; an exception is
answered with a text frame holding the traceback. HTTP GET /healthz answers OK.

Actions are a pure function of the observation: a proportional controller toward "observation/goal" when the
observation has one (the stand-in simulator's), otherwise small hash-derived actions (real simulators). With
--stochastic the controller's noise is drawn instead from the request's own generator (evalwf.policy.
episode_identity.request_rng: the episode and step it belongs to), as a sampling policy draws it: the records stay
the same under any batching.

An emulated accelerator (--forward-ms F --item-ms I): one forward pass at a time, each costing F + I * batch size
milliseconds (the shape measured for VLA models). With --max-batch N > 1 concurrent requests are answered in
batches (evalwf.policy.serving). --stats-file appends one JSON line per reply (server timing) for
scripts/bench_batching.py.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import hashlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import numpy as np

from evalwf.benchmark.records import PolicyMessage
from evalwf.common.json_types import JsonObject
from evalwf.policy.episode_identity import EPISODE_KEY, request_rng
from evalwf.policy.serving import add_batching_options, serve_policy


class StandinPolicy:
    """Deterministic: the same observation (and, with `stochastic`, the same episode and step) always yields the
    same action chunk."""

    def __init__(self, action_dim: int, horizon: int, noise: float, latency_s: float, stochastic: bool = False):
        self.action_dim = action_dim
        self.horizon = horizon
        self.noise = noise
        self.latency_s = latency_s
        self.stochastic = stochastic

    def _observation_digest(self, observation: PolicyMessage) -> bytes:
        digest = hashlib.sha256()
        for key in sorted(observation):
            if key == EPISODE_KEY:  # where the request comes from is not what the policy sees
                continue
            value = observation[key]
            digest.update(key.encode())
            digest.update(value.tobytes() if isinstance(value, np.ndarray) else repr(value).encode())
        return digest.digest()

    def infer(self, observation: PolicyMessage) -> np.ndarray:
        if self.latency_s:
            time.sleep(self.latency_s)
        if self.stochastic:
            rng = request_rng(observation)
        else:
            rng = np.random.Generator(np.random.PCG64(int.from_bytes(self._observation_digest(observation)[:8], "big")))
        noise = rng.uniform(-1.0, 1.0, size=(self.horizon, self.action_dim))
        if "observation/goal" in observation and "observation/state" in observation:
            error = np.asarray(observation["observation/goal"], float) - np.asarray(
                observation["observation/state"], float
            )
            step = np.zeros(self.action_dim)
            step[: error.size] = np.clip(error, -1.0, 1.0)[: self.action_dim]
            actions = np.clip(step + self.noise * noise, -1.0, 1.0)
        else:
            actions = 0.3 * noise
        return actions.astype(np.float32)


class EmulatedAccelerator:
    """One forward pass at a time, each costing forward_ms + item_ms per item of its batch."""

    def __init__(self, forward_ms: float, item_ms: float):
        self.forward_s, self.item_s = forward_ms / 1000.0, item_ms / 1000.0
        self.lock = threading.Lock()

    def run(self, items: int) -> None:
        if self.forward_s or self.item_s:
            with self.lock:
                time.sleep(self.forward_s + self.item_s * items)


class _Replying:
    """The stand-in policy as the openpi server calls it: observation in, {"actions": chunk} out (infer_batch:
    several at once, one forward pass)."""

    def __init__(self, policy: StandinPolicy, accelerator: EmulatedAccelerator):
        self.policy, self.accelerator = policy, accelerator

    def infer(self, observation: PolicyMessage) -> PolicyMessage:
        self.accelerator.run(1)
        return {"actions": self.policy.infer(observation)}

    def infer_batch(self, observations: list[PolicyMessage]) -> list[PolicyMessage]:
        self.accelerator.run(len(observations))
        return [{"actions": self.policy.infer(observation)} for observation in observations]


def _stats_writer(path: str | None) -> Any:
    if not path:
        return None
    handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the server's lifetime)

    def write(timing: JsonObject) -> None:
        handle.write(json.dumps({"t": time.time(), **timing}) + "\n")
        handle.flush()

    return write


async def _serve(args: argparse.Namespace) -> None:
    policy = StandinPolicy(args.action_dim, args.horizon, args.noise, args.latency_s, args.stochastic)
    metadata = {"server": "standin-policy", "pid": os.getpid(), "action_dim": args.action_dim, "horizon": args.horizon}
    batching = f"batches of up to {args.max_batch}" if args.max_batch > 1 else "no batching"
    banner = f"standin policy server listening on ws://{args.host}:{args.port} (pid {os.getpid()}, {batching})"
    await serve_policy(
        _Replying(policy, EmulatedAccelerator(args.forward_ms, args.item_ms)),
        args.host,
        args.port,
        metadata,
        banner,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        on_reply=_stats_writer(args.stats_file),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--action-dim", type=int, default=7)
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--noise", type=float, default=1.0, help="controller noise: higher -> fewer successes")
    parser.add_argument("--load-time-s", type=float, default=0.0, help="emulate checkpoint loading before listening")
    parser.add_argument("--latency-s", type=float, default=0.0, help="emulate inference latency per call")
    parser.add_argument("--stochastic", action="store_true", help="noise from the request's episode/step generator")
    parser.add_argument("--forward-ms", type=float, default=0.0, help="emulated cost of one forward pass")
    parser.add_argument("--item-ms", type=float, default=0.0, help="emulated cost per item of a forward pass")
    add_batching_options(parser)
    parser.add_argument("--stats-file", help="append one JSON line of server timing per reply")
    parser.add_argument(
        "--fail-start",
        action="store_true",
        help="exit with status 3 after loading, as a server whose checkpoint or environment is broken",
    )
    parser.add_argument(
        "--launch-log",
        help="append 'start <pid> <unix time>' here at launch and 'end <pid> <unix time>' at exit (counts starts "
        "and the seconds each one held its GPU)",
    )
    args = parser.parse_args(argv)
    if args.launch_log:
        _log_launch(args.launch_log)
    if args.load_time_s:
        print(f"loading stand-in checkpoint ({args.load_time_s}s)", flush=True)
        time.sleep(args.load_time_s)
    if args.fail_start:
        print("stand-in checkpoint is broken: RuntimeError: cannot load weights (--fail-start)", flush=True)
        sys.exit(3)
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        pass


def _log_launch(path: str) -> None:
    """One line per launch and one per exit (SIGTERM, which a worker's guardian sends first, included)."""

    def write(event: str) -> None:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{event} {os.getpid()} {time.time():.3f}\n")

    def on_term(_signum: int, _frame: object) -> None:
        sys.exit(143)

    write("start")
    atexit.register(write, "end")
    signal.signal(signal.SIGTERM, on_term)


if __name__ == "__main__":
    main()
