"""The anytime-valid test checked against an independent implementation: the `expectation` library's e-process
(Python 3.12, in .venv-expectation, built by `make expectation-env`; missing, this fails naming that command: it is
never skipped). tests/report/expectation_comparison.py, run there, says what is compared and how."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv-expectation" / "bin" / "python"
COMPARISON = Path(__file__).with_name("expectation_comparison.py")


def comparison() -> dict[str, float]:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: build it with `make expectation-env`", pytrace=False)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [str(VENV_PYTHON), "-B", str(COMPARISON)], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_capital_rejections_and_intervals_equal_the_expectation_library_s():
    found = comparison()
    # one task: the same bets (aGRAPA, written from the paper for the library's combiner) give the same capital
    assert found["bets_compared"] == 1440 and found["max_log_capital_gap"] < 1e-9
    assert (
        found["crossings"] > 0 and found["crossing_mismatches"] == 0
    )  # the same rejections at 1/alpha, at the same cycle
    assert found["intervals"] == 4 and found["max_interval_gap"] < 1e-12  # the same confidence sequence
    assert found["max_merge_gap"] < 1e-12  # worse-than-best: the library's arithmetic-mean merge of the K_ji
