"""Benchmark: one worker with K job slots sharing one policy server, batching off and on, on an emulated accelerator.

    python scripts/bench_batching.py [--slots 1 2 4 8] [--forward-ms 40] [--item-ms 3] [--json out.json]

For each K and each mode a real campaign runs through the embedded Labtasker server and ONE worker started with
`--slots K`: stand-in episodes (every step asks the policy: replan_steps 1) against the stand-in policy server
with an emulated accelerator (one forward pass at a time, each costing forward-ms + item-ms x batch size, the
shape measured for VLA models). "off" starts the server with --max-batch 1 (each request answered alone, as
openpi's own server does); "on" lets the worker's K become the server's max_batch (the default).

Printed per (K, mode), from the server's own timing of every reply (the middle 80 % of replies by time, so start-up
and the campaign's tail are left out): observations per second, mean batch size, mean per-request latency
(server-side: queueing + forward pass), and per K the ratio on/off next to the ideal
(forward + item) / (forward / K + item).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalwf.queue.embedded_server import ensure_embedded_server, stop_embedded_server  # noqa: E402
from evalwf.worker.processes import GuardedProcess  # noqa: E402


def write_config(workdir: Path, args: argparse.Namespace, batching: bool, stats: Path) -> Path:
    server = (
        f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --noise 3.0 "
        f"--forward-ms {args.forward_ms} --item-ms {args.item_ms} --stats-file {stats}"
    )
    config = {
        "run": "bench",
        "policy": {"name": "standin-accelerator", "command": server + ("" if batching else " --max-batch 1")},
        "benchmarks": {
            "standin": {
                "suites": {"alpha": ["reach", "push", "stack", "slide"], "beta": ["open", "close", "pour"]},
                "episodes_per_task": args.episodes,
                "batch_size": args.episodes,
                "max_steps": args.steps,
                "replan_steps": 1,
                "tolerance": 1e-9,  # never solved early: every episode asks the policy max_steps times
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
        replies = sorted((json.loads(line) for line in stats.read_text().splitlines()), key=lambda r: r["t"])
    middle = replies[len(replies) // 10 : len(replies) - len(replies) // 10]
    span = middle[-1]["t"] - middle[0]["t"]
    return {
        "observations": len(replies),
        "obs_per_s": (len(middle) - 1) / span if span > 0 else float("nan"),
        "mean_batch": statistics.fmean(r["batch_size"] for r in middle),
        "latency_ms": statistics.fmean(r["queue_ms"] + r["infer_ms"] for r in middle),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--forward-ms", type=float, default=40.0)
    parser.add_argument("--item-ms", type=float, default=3.0)
    parser.add_argument("--episodes", type=int, default=16, help="per task (7 tasks), in batches of 8")
    parser.add_argument("--steps", type=int, default=10, help="policy requests per episode")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    args.episodes = max(2, args.episodes)
    load = os.getloadavg()[0]
    print(
        f"emulated accelerator {args.forward_ms:g} ms per forward pass + {args.item_ms:g} ms per item; 7 tasks x "
        f"{args.episodes} episodes x {args.steps} requests; {os.cpu_count()} cores, load average {load:.1f}",
        flush=True,
    )
    header = f"{'K':>2}  {'mode':<4} {'obs/s':>7} {'batch':>6} {'latency ms':>10}"
    print(header)
    results: dict[str, dict[str, dict[str, float]]] = {}
    started = time.monotonic()
    for slots in args.slots:
        row = {mode: run(args, slots, mode == "on") for mode in ("off", "on")}
        results[str(slots)] = row
        for mode, numbers in row.items():
            print(
                f"{slots:>2}  {mode:<4} {numbers['obs_per_s']:7.1f} {numbers['mean_batch']:6.2f} "
                f"{numbers['latency_ms']:10.1f}",
                flush=True,
            )
        ideal = (args.forward_ms + args.item_ms) / (args.forward_ms / slots + args.item_ms)
        ratio = row["on"]["obs_per_s"] / row["off"]["obs_per_s"]
        row["ratio"] = {"on_off": ratio, "ideal": ideal, "of_ideal": ratio / ideal}
        print(f"    on/off {ratio:.2f}x (ideal {ideal:.2f}x: {100 * ratio / ideal:.0f} % of it)", flush=True)
    print(f"done in {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
