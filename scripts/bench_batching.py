"""Benchmark: one worker with K job slots sharing one policy server, batching off and on, on an emulated accelerator.

    python scripts/bench_batching.py [--slots 1 2 4 8] [--forward-ms 40] [--item-ms 3] [--outside] [--json out.json]

For each K and each mode a real campaign runs through the embedded Labtasker server and ONE worker started with
`--slots K`: stand-in episodes (every step asks the policy: replan_steps 1) against the stand-in policy server
with an emulated accelerator (one forward pass at a time, each costing forward-ms + item-ms x batch size, the
shape measured for VLA models). "off" starts the server with --max-batch 1 (each request answered alone, as
openpi's own server does); "on" lets the worker's K become the server's max_batch (the default).

Printed per (K, mode), from the server's own timing of every reply (the middle 80 % of replies by time, so start-up
and the campaign's tail are left out): observations per second, mean batch size, mean per-request latency
(server-side: queueing + forward pass), and per K the ratio on/off next to the ideal
(forward + item) / (forward / C + item), C = min(K, batches): the slots that can be busy at once (the campaign has one
batch per task, 7).

--outside also measures, in the same invocation and so under the same load, an outside client: the same server
command started here (--max-batch 1 off, K on), and min(K, 7) plain websocket client processes, one per batch as the
worker's slots take them, each sending its episodes' requests back to back (the stand-in's observation and the
episode key a job step sends, its first action stepped into the stand-in episode) with no worker, queue, Snakemake
or policy client between them: what the server and the emulated accelerator allow, against which the project's own
on/off ratio is compared.
"""

from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalwf.queue.embedded_server import ensure_embedded_server, stop_embedded_server  # noqa: E402
from evalwf.worker.processes import GuardedProcess  # noqa: E402

SUITES = {"alpha": ["reach", "push", "stack", "slide"], "beta": ["open", "close", "pour"]}
BATCHES = sum(len(tasks) for tasks in SUITES.values())  # one batch per task (batch_size = episodes_per_task)
TOLERANCE = 1e-9  # never solved early: every episode asks the policy max_steps times


def server_command(args: argparse.Namespace, stats: Path) -> str:
    """The stand-in policy server with the emulated accelerator ({python} and {port} filled in by who starts it)."""
    return (
        f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --noise 3.0 "
        f"--forward-ms {args.forward_ms} --item-ms {args.item_ms} --stats-file {stats}"
    )


def write_config(workdir: Path, args: argparse.Namespace, batching: bool, stats: Path) -> Path:
    server = server_command(args, stats)
    config = {
        "run": "bench",
        "policy": {"name": "standin-accelerator", "command": server + ("" if batching else " --max-batch 1")},
        "benchmarks": {
            "standin": {
                "suites": SUITES,
                "episodes_per_task": args.episodes,
                "batch_size": args.episodes,
                "max_steps": args.steps,
                "replan_steps": 1,
                "tolerance": TOLERANCE,
            }
        },
    }
    path = workdir / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(args: argparse.Namespace, slots: int, batching: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-batching-") as tmp:
        workdir = Path(tmp)
        stats = workdir / "stats.jsonl"
        config = write_config(workdir, args, batching, stats)
        ensure_embedded_server(workdir, log=lambda _: None)
        worker = GuardedProcess(
            [
                *[sys.executable, "-m", "evalwf.worker.main", "--gpus", "0", "--slots", str(slots)],
                *["--poll-max", "0.5", "--allow-workflow", str(workdir), "--allow-workflow", str(REPO)],
            ],
            cwd=workdir,
            log_path=workdir / "worker.log",
            grace_s=30,
        )
        try:
            command = [
                *[sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile")],
                *["--directory", str(workdir), "--configfile", str(config), "--profile"],
                *[str(REPO / "profiles" / "labtasker"), "--seconds-between-status-checks", "1"],
                *["--labtasker-allow-workflow", str(REPO)],  # the workers allow the checkout's Snakefile
            ]
            done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"snakemake failed ({done.returncode}):\n{done.stderr[-3000:]}")
        finally:
            worker.stop(timeout_s=60)
            stop_embedded_server(workdir / ".labtasker")
        return reply_rates(stats)


def reply_rates(stats: Path) -> dict[str, float]:
    """Observations per second, mean batch and mean server-side latency over the middle 80 % of the replies the
    server timed (start-up and the tail left out)."""
    replies = sorted((json.loads(line) for line in stats.read_text().splitlines()), key=lambda r: r["t"])
    middle = replies[len(replies) // 10 : len(replies) - len(replies) // 10]
    span = middle[-1]["t"] - middle[0]["t"]
    return {
        "observations": len(replies),
        "obs_per_s": (len(middle) - 1) / span if span > 0 else float("nan"),
        "mean_batch": statistics.fmean(r["batch_size"] for r in middle),
        "latency_ms": statistics.fmean(r["queue_ms"] + r["infer_ms"] for r in middle),
    }


def ideal_ratio(forward_ms: float, item_ms: float, slots: int) -> float:
    """On/off throughput of K slots if every pass carried one request per busy slot: (forward + item) / (forward / C +
    item), C = min(K, batches), the slots that can be busy at once: with 7 batches an 8th slot never sends a request."""
    busy = min(slots, BATCHES)
    return (forward_ms + item_ms) / (forward_ms / busy + item_ms)


# -- the outside client ------------------------------------------------------------------------------------------


def _outside_slot(endpoint: str, batches: Any, steps: int, ready: Any, failures: Any) -> None:
    """One slot without the harness: a plain websocket connection; takes batches (task, episodes) until none are
    left and sends each episode's requests back to back, stepping the stand-in episode with the first action."""
    import numpy as np
    from websockets.sync.client import connect

    from benchmarks.standin.sim import StandinEpisode, episode_instruction, episode_seed
    from evalwf.policy.episode_identity import EPISODE_KEY, EpisodeTag
    from evalwf.policy.wire import packb, unpackb

    # loopback never through a proxy (websockets >= 15 honours http_proxy even for 127.0.0.1; older ones have no option)
    no_proxy = {"proxy": None} if "proxy" in inspect.signature(connect).parameters else {}
    try:
        with connect(
            endpoint, compression=None, max_size=None, ping_interval=None, open_timeout=60, **no_proxy
        ) as connection:
            unpackb(connection.recv(timeout=60))  # the server's metadata
            ready.wait(120)
            while (batch := batches.get()) is not None:
                suite, task, episodes = batch
                for index in range(episodes):
                    seed = episode_seed(suite, task, index, 0)
                    episode = StandinEpisode(seed, episode_instruction(task, seed), TOLERANCE, 0.0)
                    for step in range(steps):
                        key = EpisodeTag("standin", suite, task, index, seed=seed, step=step).as_key()
                        connection.send(packb({**episode.observation(), EPISODE_KEY: key}))
                        reply = connection.recv(timeout=120)
                        if isinstance(reply, str):
                            raise RuntimeError(f"the server failed a request: {reply[:500]}")
                        episode.step(np.asarray(unpackb(reply)["actions"])[0])
    except Exception as error:  # reported by the parent
        failures.put(f"{type(error).__name__}: {error}")


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def outside_run(args: argparse.Namespace, slots: int, batching: bool) -> dict[str, float]:
    """The server command the campaign's worker starts, started here, and min(slots, batches) plain clients."""
    with tempfile.TemporaryDirectory(prefix="bench-batching-outside-") as tmp:
        stats = Path(tmp) / "stats.jsonl"
        port = free_loopback_port()
        command = server_command(args, stats).format(python=sys.executable, port=port).split()
        command += ["--max-batch", str(slots if batching else 1)]
        with open(Path(tmp) / "server.log", "wb") as log:
            server = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        processes: list[Any] = []
        try:
            context = multiprocessing.get_context("spawn")
            clients = min(slots, BATCHES)
            batches, failures, ready = context.Queue(), context.Queue(), context.Barrier(clients)
            for suite, tasks in SUITES.items():
                for task in tasks:
                    batches.put((suite, task, args.episodes))
            for _ in range(clients):
                batches.put(None)
            endpoint = f"ws://127.0.0.1:{port}"
            processes = [
                context.Process(
                    target=_outside_slot, args=(endpoint, batches, args.steps, ready, failures), daemon=True
                )
                for _ in range(clients)
            ]
            _wait_listening(port, server)
            for process in processes:
                process.start()
            for process in processes:
                process.join(600)
            errors = []
            while not failures.empty():
                errors.append(failures.get())
            if errors or any(process.exitcode != 0 for process in processes):
                raise SystemExit(f"outside client failed: {errors or [p.exitcode for p in processes]}")
        finally:
            for process in processes:  # a client still running after the joins' deadline
                if process.is_alive():
                    process.kill()
                    process.join(10)
            server.terminate()
            server.wait(30)
        return reply_rates(stats)


def _wait_listening(port: int, server: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the policy server exited ({server.returncode}) before listening")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"the policy server did not listen on port {port} within {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--forward-ms", type=float, default=40.0)
    parser.add_argument("--item-ms", type=float, default=3.0)
    parser.add_argument("--episodes", type=int, default=16, help="per task (7 tasks), one batch per task")
    parser.add_argument("--steps", type=int, default=10, help="policy requests per episode")
    parser.add_argument("--outside", action="store_true", help="also measure the outside client (module docstring)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    args.episodes = max(2, args.episodes)
    load = os.getloadavg()
    print(
        f"emulated accelerator {args.forward_ms:g} ms per forward pass + {args.item_ms:g} ms per item; {BATCHES} tasks "
        f"x {args.episodes} episodes x {args.steps} requests; {os.cpu_count()} cores, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    print(f"{'K':>2}  {'mode':<12} {'obs/s':>7} {'batch':>6} {'latency ms':>10}")
    results: dict[str, dict[str, dict[str, float]]] = {}
    started = time.monotonic()
    for slots in args.slots:
        row: dict[str, dict[str, float]] = {}
        for mode in ("off", "on"):  # the outside client right after the project's own run of the same mode
            row[mode] = run(args, slots, mode == "on")
            if args.outside:
                row[f"outside {mode}"] = outside_run(args, slots, mode == "on")
        results[str(slots)] = row
        for mode, numbers in row.items():
            print(
                f"{slots:>2}  {mode:<12} {numbers['obs_per_s']:7.1f} {numbers['mean_batch']:6.2f} "
                f"{numbers['latency_ms']:10.1f}",
                flush=True,
            )
        busy = min(slots, BATCHES)
        ideal = ideal_ratio(args.forward_ms, args.item_ms, slots)
        ratio = row["on"]["obs_per_s"] / row["off"]["obs_per_s"]
        row["ratio"] = {"on_off": ratio, "ideal": ideal, "of_ideal": ratio / ideal}
        print(f"    on/off {ratio:.2f}x (ideal at {busy} busy slots {ideal:.2f}x: {100 * ratio / ideal:.0f} % of it)")
        if args.outside:
            outside = row["outside on"]["obs_per_s"] / row["outside off"]["obs_per_s"]
            row["ratio"] |= {"outside_on_off": outside, "of_outside": ratio / outside}
            print(f"    outside client on/off {outside:.2f}x: the project's is {100 * ratio / outside:.0f} % of it")
    print(f"done in {time.monotonic() - started:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
