"""LIBERO lives in its own environment (invariant 9): the workflow's interpreter has no simulator, the LIBERO
interpreter has no workflow packages, and the simulator tests pass inside the LIBERO interpreter."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

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


@pytest.mark.slow  # the real-simulator tests, about 2-3 minutes on 2 cores
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
