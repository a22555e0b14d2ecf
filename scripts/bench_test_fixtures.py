"""What the expensive pieces of the test suite cost, each on its own: a Labtasker server (loopback URL and embedded),
`snakemake -n` and local-profile runs of stand-in campaigns of a few shapes, and (with --libero) a LIBERO
environment built, reset and stepped in the LIBERO interpreter.

    python scripts/bench_test_fixtures.py [--libero]

It prints, per piece, the wall seconds, the CPU seconds of this process and of the children it waited for (user +
sys; a daemon server's own CPU is not among them), and the load average when it started. Wall seconds grow with the
machine's load; CPU seconds stay about the same, so compare those between runs on a shared machine. docs/test-suite.md
says what the numbers mean for the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "executor")]

from conftest import run_snakemake, standin_config, write_config  # noqa: E402
from labtasker_testkit import LOCAL_PROFILE, start_url_server  # noqa: E402

from evalwf.queue.embedded_server import ensure_embedded_server, stop_embedded_server  # noqa: E402

CAMPAIGNS = {  # stand-in sections, from one batch job to the shared fixtures' default (3 tasks x 3 batches)
    "1 task, 1 batch": {"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2},
    "1 task, 3 batches": {"suites": {"alpha": ["reach"]}, "episodes_per_task": 6, "batch_size": 2},
    "3 tasks, 1 batch each": {"episodes_per_task": 2, "batch_size": 2},
    "3 tasks, 3 batches each (standin_config default)": {},
}
LIBERO_PIECES = """
import os, resource, time
from benchmarks.libero import env as e
from benchmarks.libero.suites import DUMMY_ACTION
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def piece(what, run):
    wall, used, load = time.monotonic(), cpu(), os.getloadavg()[0]
    result = run()
    print(f"LIBERO: {what:52s} wall {time.monotonic() - wall:6.1f} s  cpu {cpu() - used:6.1f} s  load {load:.1f}")
    return result
spec = e.task_spec("libero_spatial", 0)
env = piece("build an env (256 px)", lambda: e.make_env(spec, 256))
piece("reset", env.reset)
piece("10 steps", lambda: [env.step(list(DUMMY_ACTION)) for _ in range(10)])
e.close_env(env)
"""


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def piece(what: str, run: Callable[[], Any]) -> Any:
    wall, used, load = time.monotonic(), cpu_seconds(), os.getloadavg()[0]
    result = run()
    print(f"{what:60s} wall {time.monotonic() - wall:6.1f} s  cpu {cpu_seconds() - used:6.1f} s  load {load:.1f}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libero", action="store_true", help="also time LIBERO in .venv-libero/bin/python")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-test-fixtures-"))
    piece("Labtasker server start (loopback URL, daemon)", lambda: start_url_server(base / "url", secrets.token_hex(8)))
    piece("Labtasker server stop", lambda: stop_embedded_server(base / "url"))
    (base / "embedded").mkdir()
    piece("embedded server start (Unix socket)", lambda: ensure_embedded_server(base / "embedded", log=lambda _: None))
    piece("embedded server stop", lambda: stop_embedded_server(base / "embedded" / ".labtasker"))
    piece("python -c 'import snakemake.cli'", lambda: subprocess.run([sys.executable, "-c", "import snakemake.cli"]))
    for index, (name, section) in enumerate(CAMPAIGNS.items()):
        workdir = base / f"campaign{index}"
        workdir.mkdir()
        configfile = str(write_config(workdir / "c.yaml", standin_config(workdir, standin=section)))
        for label, options in (("snakemake -n", ["-n"]), ("local profile", LOCAL_PROFILE)):
            run = lambda w=workdir, o=options, c=configfile: run_snakemake(w, *o, "--configfile", c)  # noqa: E731
            piece(f"{label}: {name}", run)
    if args.libero:
        subprocess.run([str(REPO / ".venv-libero" / "bin" / "python"), "-c", LIBERO_PIECES], cwd=REPO, check=True)


if __name__ == "__main__":
    main()
