"""Benchmark: wall time of a stand-in campaign through the local profile and through Labtasker with N workers.

    python scripts/bench_campaign.py [--tasks 4] [--episodes 8] [--batch-size 2] [--step-time 0.02] [--workers 1 2]

Prints, per mode: wall time, batches, summed in-batch evaluation time (from the batch JSONs) and the
per-batch overhead (job step start-up, queue round trips, policy handshake) = (wall x parallel slots -
summed evaluation time) / batches. docs/performance.md quotes these numbers.
"""

from __future__ import annotations

import argparse
import json
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

TASKS = ["reach", "push", "stack", "slide"]


def write_config(workdir: Path, args: argparse.Namespace) -> Path:
    config = {
        "run": "bench",
        "policy": {
            "name": "standin-policy",
            "command": "{python} -m benchmarks.standin.policy_server --port {port}",
            "startup_timeout_s": 60,
        },
        "benchmarks": {
            "standin": {
                "suites": {"alpha": TASKS[: args.tasks]},
                "episodes_per_task": args.episodes,
                "batch_size": args.batch_size,
                "max_steps": 40,
                "step_time_s": {"default": args.step_time},
            }
        },
    }
    path = workdir / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(workdir: Path, config: Path, *extra: str) -> float:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "workflow" / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config),
        *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"snakemake failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def evaluation_seconds(workdir: Path) -> tuple[int, float]:
    files = list((workdir / "results" / "bench" / "standin" / "batches").rglob("*.json"))
    return len(files), sum(json.loads(p.read_text())["duration_s"] for p in files)


def report(mode: str, slots: int, wall: float, workdir: Path) -> None:
    batches, busy = evaluation_seconds(workdir)
    overhead = (wall * slots - busy) / batches
    print(
        f"{mode:<22} wall {wall:6.1f} s  batches {batches:3d}  evaluation {busy:6.1f} s  "
        f"overhead/batch {overhead:5.2f} s",
        flush=True,
    )


def run_local(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        config = write_config(workdir, args)
        wall = snakemake(workdir, config, "--profile", str(REPO / "profiles" / "local"), "--cores", "1")
        report("local, 1 job at a time", 1, wall, workdir)


def run_labtasker(args: argparse.Namespace, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        config = write_config(workdir, args)
        # the default set-up: submitter and workers find the embedded server of the workflow directory (its socket)
        # themselves
        ensure_embedded_server(workdir, log=lambda _: None)
        gpus = ",".join(str(i) for i in range(workers))
        pool = GuardedProcess(
            [
                *[sys.executable, "-m", "evalwf.worker.main", "--gpus", gpus],
                *["--poll-max", "0.5", "--allow-workflow", str(workdir), "--allow-workflow", str(REPO)],
            ],
            cwd=workdir,
            log_path=workdir / "workers.log",
            grace_s=30,
        )
        try:
            wall = snakemake(
                workdir,
                config,
                "--profile",
                str(REPO / "profiles" / "labtasker"),
                "--labtasker-allow-workflow",
                str(REPO),
                "--seconds-between-status-checks",
                "1",
            )
        finally:
            pool.stop(timeout_s=60)
            stop_embedded_server(workdir / ".labtasker")
        report(f"labtasker, {workers} worker(s)", workers, wall, workdir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=4, choices=range(1, 5))
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--step-time", type=float, default=0.02, help="emulated simulator seconds per step")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    print(
        f"stand-in campaign: {args.tasks} tasks x {args.episodes} episodes, batches of {args.batch_size}, "
        f"{args.step_time} s per step; machine: {sys.platform}, {__import__('os').cpu_count()} cores",
        flush=True,
    )
    run_local(args)
    for count in args.workers:
        run_labtasker(args, count)


if __name__ == "__main__":
    main()
