#!/usr/bin/env bash
# Build the light core's oldest environment: Python 3.10 with numpy 1.26 (RoboTwin's own environment pins both),
# holding only the light core (what evalwf.job.sim_step imports), offline from PyPI, idempotently.
#
#   scripts/setup_py310_env.sh            (make py310-env; make test depends on it)
#
# The simulator side of a job step runs in the benchmark's own interpreter, and RoboTwin's is Python 3.10 with
# numpy 1.26, while the workflow's .venv is Python >= 3.11 with numpy 2. The tests run the light core in this venv
# (.venv-py310, PY310_VENV=<path> for another place): every light-core module imported and checked for 3.11-only
# modules (scripts/light_core.py), and the RoboTwin stand-in campaign through it. No Snakemake, Labtasker or pandas,
# and not this checkout either (job steps put it on PYTHONPATH themselves, as for any simulator environment).
#
# The interpreter: $PY310, else python3.10 on PATH, else pyenv's newest 3.10 (scripts/side_venv.sh). None found is an
# error, never a skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PY310_VENV:-$ROOT/.venv-py310}"
# The light core at the oldest versions a benchmark's environment uses (websockets 16.0: the newest with Python 3.10
# wheels, as scripts/setup_robotwin.sh pins it; rpds-py 0.30.0: the newest with 3.10 wheels), dependencies included.
PINS=(numpy==1.26.4 msgpack==1.2.4 websockets==16.0 pyyaml==6.0.3 jsonschema==4.26.0 attrs==26.1.0
    jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0 typing-extensions==4.16.0)

NAME=setup_py310_env
MINOR=3.10
PY_VAR=PY310
MISSING="the light core must be tested on RoboTwin's Python 3.10. Install one (pyenv install 3.10.13, apt-get \
install python3.10-venv, conda create -p /opt/py310 python=3.10) and rerun, or set PY310=/path/to/python3.10"
# shellcheck source=scripts/side_venv.sh
source "$ROOT/scripts/side_venv.sh"

side_venv_install
"$PY" -m pip check --disable-pip-version-check >/dev/null || die "pip check failed in $VENV: $("$PY" -m pip check)"
"$PY" -c 'import numpy, msgpack, websockets, yaml, jsonschema; assert numpy.__version__ == "1.26.4", numpy.__version__' ||
    die "the light core does not import in $VENV"
side_venv_ready "numpy 1.26.4"
