"""Several GPUs on one machine: one guarded GPU worker process each, stopped together."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from evalwf.worker.log import log
from evalwf.worker.processes import GuardedProcess
from evalwf.worker.task_run import LOCAL_WORKERS_ENV


def run_one_worker_per_gpu(options: argparse.Namespace, gpus: list[str], url: str | None) -> int:
    children: dict[str, GuardedProcess] = {}
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    os.environ[LOCAL_WORKERS_ENV] = str(len(gpus))
    for gpu in gpus:
        argv = [sys.executable, "-m", "evalwf.worker.main", "--gpus", gpu, *_passthrough(options)]
        if url:
            argv += ["--url", url]
        if options.log_dir:
            argv += ["--log-dir", str(Path(options.log_dir) / f"gpu{gpu}")]
        # the child worker needs time to hand its tasks back when its guardian asks it to stop
        children[gpu] = GuardedProcess(argv, grace_s=60.0)
    log(f"supervising {len(children)} GPU worker(s): {', '.join(f'gpu {g} pid {p.pid}' for g, p in children.items())}")
    while not stop.is_set() and any(p.poll() is None for p in children.values()):
        stop.wait(0.5)
    codes = {gpu: process.stop(timeout_s=90.0) for gpu, process in children.items()}
    log(f"GPU workers exited: {codes}")
    return 0 if all(code in (0, None) for code in codes.values()) else 1


def _passthrough(options: argparse.Namespace) -> list[str]:
    args = [
        "--slots", str(options.slots),
        "--queue", options.queue,
        "--route", options.route,
        "--idle-timeout", str(options.idle_timeout),
        "--poll-max", str(options.poll_max),
        "--heartbeat", str(options.heartbeat),
    ]  # fmt: skip
    if options.cold_job_steps:
        args.append("--cold-job-steps")
    for directory in options.allow_workflow or []:
        args += ["--allow-workflow", directory]
    for directory in options.allow_config or []:
        args += ["--allow-config", directory]
    if options.server_root:
        args += ["--server-root", options.server_root]
    if options.configfile:
        args += ["--configfile", *options.configfile]
    return args
