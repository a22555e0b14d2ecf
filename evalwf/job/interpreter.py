"""Run one simulator step in a benchmark's own interpreter: `python -m evalwf.job.sim_step --request <file>`, its
output copied into the job's log, its failure's cause carried back (FAILURE_PREFIX)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalwf.common.errors import SimulatorEnvError
from evalwf.contract.sim_request import SimRequest
from evalwf.plan.interpreter import child_env

ENTRY_MODULE = "evalwf.job.sim_step"
FAILURE_PREFIX = "sim_step failed: "  # the last line of a failed step: its error's type and first line


def run_in_interpreter(
    python: str, request: SimRequest, log: Callable[[str], None], what: str, stream: Any = None
) -> None:
    """Run one simulator step (`request`, evalwf.contract.sim_request) in `python`, its output copied line by line to
    `stream` (default: our stderr, which the job's log tees). The child is in our process group, so whatever
    kills this job step (the worker's guardian, Ctrl-C) kills it too; if we fail first, we stop it."""
    out = stream if stream is not None else sys.stderr
    with tempfile.NamedTemporaryFile("w", prefix="sim-step-", suffix=".json", delete=False) as handle:
        handle.write(request.to_json())
        request_path = handle.name
    command = [python, "-m", ENTRY_MODULE, "--request", request_path]
    log(f"{what}: in {python}")
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child_env(),
            text=True,
            errors="replace",
        )
        cause = ""
        try:
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                out.flush()
                if line.startswith(FAILURE_PREFIX):
                    cause = line[len(FAILURE_PREFIX) :].strip()
            code = process.wait()
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    finally:
        Path(request_path).unlink(missing_ok=True)
    if code != 0:
        raise SimulatorEnvError(
            f"{what} failed in {python}: {cause or f'exit status {code}'}\n"
            f"(exit status {code}; its whole output is above in this log)",
            cause=cause or None,
        )
