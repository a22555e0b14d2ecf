"""LIBERO lives in its own environment (invariant 9): the workflow's interpreter has no simulator, the LIBERO
interpreter has no workflow packages, and the simulator tests pass inside the LIBERO interpreter."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from libero_interpreter import PYTHON, REPO, SKIP_WITHOUT_LIBERO

from evalwf.plan.interpreter import child_env

pytestmark = [pytest.mark.libero, SKIP_WITHOUT_LIBERO]


def test_the_workflow_interpreter_has_no_simulator():
    present = [m for m in ("libero", "robosuite", "mujoco") if importlib.util.find_spec(m) is not None]
    assert present == [], f"{sys.prefix} holds {present}: rerun scripts/setup_libero.sh, which removes them"


def test_the_libero_interpreter_has_no_workflow_packages():
    code = "import importlib.util as u; print([m for m in ('snakemake', 'labtasker', 'pandas') if u.find_spec(m)])"
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_setup_rerun_with_nothing_changed_skips_the_smoke_test():
    """`make demo` reruns scripts/setup_libero.sh each time: with nothing changed since its smoke test passed (the
    digest in .smoke-test.ok), the rerun must not create a LIBERO env again (30 of the 43 s of a `make demo` with
    nothing to do). The first run here may still run it, after a change to the environment or to this code."""
    venv = Path(PYTHON).parents[1]
    if venv != REPO / ".venv-libero":
        pytest.skip(f"the configured LIBERO interpreter {PYTHON} is not this checkout's .venv-libero")

    def setup() -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "scripts/setup_libero.sh", "--skip-apt"], capture_output=True, text=True, cwd=REPO, timeout=600
        )
        return done, time.monotonic() - started

    done, _ = setup()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    done, seconds = setup()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "smoke test: passed before in this same environment" in done.stdout, done.stdout
    assert "smoke test: one real env" not in done.stdout
    assert seconds < 10, f"a setup rerun with nothing to do took {seconds:.1f}s"


@pytest.mark.slow  # the real-simulator tests, about 1 minute on 2 cores
def test_simulator_tests_pass_in_the_libero_interpreter():
    """tests/benchmarks/libero/test_libero_sim.py imports LIBERO, so it runs in the LIBERO interpreter's pytest."""
    command = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/benchmarks/libero/test_libero_sim.py"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**child_env(), "REQUIRE_LIBERO": "1"},
        timeout=900,
    )
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 5, done.stdout[-2000:]
