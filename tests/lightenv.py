"""The oldest interpreter a benchmark uses, for the tests that run the light core there: .venv-py310, Python 3.10 with
numpy 1.26 and the light core only (no Snakemake, Labtasker, pandas or matplotlib, not this checkout either), built
by `make py310-env` (scripts/setup_py310_env.sh; `make test` builds it). Missing, it fails the tests that need it
with that command: it is never skipped. scripts/light_core.py (what the light core is, and its check) is loaded
from here as a module."""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

import pytest
from scriptkit import load_script

REPO = Path(__file__).resolve().parents[1]
PY310 = REPO / ".venv-py310" / "bin" / "python"


def py310_python() -> Path:
    if not PY310.exists():
        pytest.fail(f"{PY310} is missing: build it with `make py310-env` (scripts/setup_py310_env.sh)", pytrace=False)
    return PY310


@functools.cache
def light_core_script() -> ModuleType:
    return load_script("light_core", "light_core_script")
