"""The LIBERO interpreter the shipped configs name (benchmarks.libero.python in config/demo.yaml), for the tests
that run LIBERO through it: skipped when it is missing, unless REQUIRE_LIBERO=1 (CI), which makes that an error."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from evalwf.common.errors import SimulatorEnvError
from evalwf.plan.interpreter import child_env, resolve_interpreter

REPO = Path(__file__).resolve().parents[3]
CONFIGURED = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())["benchmarks"]["libero"]["python"]


def libero_python() -> tuple[str | None, str | None]:
    """(the LIBERO interpreter, None) or (None, why it cannot run LIBERO)."""
    try:
        python = resolve_interpreter(CONFIGURED, "libero")
    except SimulatorEnvError as error:
        return None, str(error)
    check = subprocess.run(
        [python, "-m", "benchmarks.libero.env"], capture_output=True, text=True, env=child_env(), timeout=120
    )
    if check.returncode != 0:
        return None, f"{python}: {check.stdout.strip()} {check.stderr.strip()[-500:]}"
    return python, None


PYTHON, REASON = libero_python()
if REASON is not None and os.environ.get("REQUIRE_LIBERO") == "1":  # CI sets it: never skip silently there
    pytest.fail(f"REQUIRE_LIBERO=1 but the LIBERO interpreter cannot run LIBERO: {REASON}", pytrace=False)
SKIP_WITHOUT_LIBERO = pytest.mark.skipif(REASON is not None, reason=f"LIBERO interpreter not available: {REASON}")
