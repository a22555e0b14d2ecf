"""What a policy that never starts costs: real campaigns through the real Labtasker server, real Snakemake
(profiles/labtasker: --retries 2, keep-going) and W real workers, with a stand-in policy server that either
crashes after loading (--fail-start) or hangs past policy.startup_timeout_s.

    python scripts/bench_breaker.py [--batches 8] [--workers 2] [--load-s 2] [--startup-timeout-s 5]
                                    [--breaker 0 2] [--json out.json]

For each failure kind x each value of --labtasker-policy-breaker (0 = off: every batch tries to start the server,
as before the breaker existed; "default" = the option left out) it prints: server launches, GPU-seconds held
by those launches (the summed lifetime of every launched server process, from its own launch log), batches
reported failed, and the campaign's span; then the same projected to LIBERO's full campaign (400 batches,
startup_timeout_s 900, config/libero.yaml): launches per batch x 400 x the seconds one launch holds a GPU.

Sized for a 2-core machine: the stand-in server sleeps while it "loads", so the CPUs are not the bottleneck.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalwf.contract import CLIENT_SOCKET_ENV, CLIENT_URL_ENV  # noqa: E402
from evalwf.queue.embedded_server import ensure_embedded_server, stop_embedded_server  # noqa: E402

FULL_BATCHES = 400  # LIBERO: 4 suites x 10 tasks x 50 trials in batches of 5
FULL_STARTUP_TIMEOUT_S = 900  # config/libero.yaml


def campaign_config(workdir: Path, batches: int, kind: str, load_s: float, timeout_s: float) -> Path:
    launches = workdir / "launches.log"
    server = f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --launch-log {launches}"
    server += f" --load-time-s {load_s} --fail-start" if kind == "crash" else " --load-time-s 3600"
    config = {
        "run": "breaker",
        "results_dir": str(workdir / "results"),
        "manifest_cache": str(workdir / "cache"),
        "policy": {"name": f"never-starts-{kind}", "command": server, "startup_timeout_s": timeout_s},
        "benchmarks": {
            "standin": {
                "suites": {"alpha": ["reach"]},
                "episodes_per_task": batches,
                "batch_size": 1,
                "max_steps": 5,
            }
        },
    }
    path = workdir / "campaign.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def launch_seconds(path: Path, until: float) -> list[float]:
    """Lifetime of every launched server (a launch without an end line is counted until `until`)."""
    starts: dict[str, float] = {}
    lifetimes = []
    for line in path.read_text().splitlines() if path.exists() else []:
        event, pid, stamp = line.split()
        if event == "start":
            starts[pid] = float(stamp)
        elif pid in starts:
            lifetimes.append(float(stamp) - starts.pop(pid))
    return lifetimes + [until - started for started in starts.values()]


def run_campaign(args: argparse.Namespace, kind: str, breaker: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-breaker-") as tmp:
        workdir = Path(tmp)
        config = campaign_config(workdir, args.batches, kind, args.load_s, args.startup_timeout_s)
        ensure_embedded_server(workdir, log=lambda _: None)
        # the workers and the submitter of the directory find its embedded server (on its socket) themselves
        env = {k: v for k, v in os.environ.items() if k not in (CLIENT_URL_ENV, CLIENT_SOCKET_ENV)}
        gpus = ",".join(str(i) for i in range(args.workers))
        worker_argv = [
            *[sys.executable, "-m", "evalwf.worker.main", "--gpus", gpus, "--idle-timeout", "0"],
            *["--poll-max", "0.5", "--allow-workflow", str(workdir), "--allow-workflow", str(REPO)],
        ]
        with open(workdir / "workers.log", "wb") as out:
            workers = subprocess.Popen(worker_argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            time.sleep(2.0)  # the workers are up and polling before the campaign starts, as on a cluster
            argv = [
                *[sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile")],
                *["--directory", str(workdir), "--configfile", str(config)],
                *["--profile", str(REPO / "profiles" / "labtasker"), "--labtasker-allow-workflow", str(REPO)],
            ]
            if breaker != "default":
                argv += ["--labtasker-policy-breaker", breaker]
            started = time.monotonic()
            done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=args.timeout)
            span = time.monotonic() - started
        finally:
            workers.send_signal(signal.SIGTERM)
            try:
                workers.wait(60)
            except subprocess.TimeoutExpired:
                workers.kill()
            stop_embedded_server(workdir / ".labtasker")
        output = done.stdout + done.stderr
        lifetimes = launch_seconds(workdir / "launches.log", time.time())
        failed = output.count("Error in rule evaluate_batch")
    return {
        "kind": kind,
        "breaker": breaker,
        "batches": args.batches,
        "workers": args.workers,
        "launches": len(lifetimes),
        "gpu_s": sum(lifetimes),
        "batch_errors_printed": failed,
        "span_s": span,
        "exit": done.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8, help="batches of the never-starting policy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--load-s", type=float, default=2.0, help="crash: seconds 'loading' before it exits")
    parser.add_argument("--startup-timeout-s", type=float, default=5.0, help="policy.startup_timeout_s (hang)")
    parser.add_argument("--kinds", nargs="+", default=["crash", "hang"], choices=["crash", "hang"])
    parser.add_argument(
        "--breaker", nargs="+", default=["0", "default"], help="--labtasker-policy-breaker values (default: omitted)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds a campaign may take")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    rows = [run_campaign(args, kind, breaker) for kind in args.kinds for breaker in args.breaker]
    print(
        f"\nA policy that never starts: {args.batches} batches, {args.workers} workers, profiles/labtasker "
        f"(--retries 2); crash after {args.load_s:g}s of loading / hang past startup_timeout_s "
        f"{args.startup_timeout_s:g}s"
    )
    print(f"{'kind':6} {'breaker':>8} {'launches':>9} {'GPU-s':>8} {'errors':>7} {'span s':>7}   projected to LIBERO")
    for row in rows:
        per_launch = FULL_STARTUP_TIMEOUT_S if row["kind"] == "hang" else args.load_s
        # off: every batch tries (launches grow with the batches); on: at most N launches in the whole campaign
        grows = row["breaker"] == "0"
        launches = row["launches"] / args.batches * FULL_BATCHES if grows else row["launches"]
        row["projected_gpu_h"] = launches * per_launch / 3600
        print(
            f"{row['kind']:6} {row['breaker']:>8} {row['launches']:>9} {row['gpu_s']:>8.1f} "
            f"{row['batch_errors_printed']:>7} {row['span_s']:>7.1f}   {launches:.0f} launches x {per_launch:g}s = "
            f"{row['projected_gpu_h']:.2f} GPU-h"
        )
    print(
        f"(projection: {FULL_BATCHES} batches, {FULL_STARTUP_TIMEOUT_S}s per hanging launch; with the breaker on, "
        "the launches do not grow with the campaign)"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
