#!/usr/bin/env bash
# Build the side environment in which the anytime-valid test (evalwf/report/sequential.py) is checked against an
# independent implementation: the `expectation` library (PyPI 0.6.1, e-values and e-processes), which needs
# Python >= 3.12 while the workflow's .venv is 3.11. Offline from the pip cache when warm, else from PyPI;
# idempotent.
#
#   scripts/setup_expectation_env.sh            (make expectation-env; make test depends on it)
#
# It holds only what the comparison imports (tests/report/expectation_comparison.py: expectation's e-process
# updater, combiners and merging functions, which import numpy, scipy and pydantic), pinned, --no-deps:
# expectation's plotting dependencies (pandas, plotly, matplotlib) are left out because nothing compared imports
# them; the script proves the comparison's imports work instead of `pip check`. Not this checkout either: the
# test puts it on PYTHONPATH. expectation is GPL-3.0 (with a no-AI-training clause): it is installed here for
# a test only, never vendored or shipped.
#
# The interpreter: $PY312, else python3.12 on PATH, else pyenv's newest 3.12. None found is an error, never a skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EXPECTATION_VENV:-$ROOT/.venv-expectation}"
PINS=(expectation==0.6.1 numpy==2.5.5 scipy==1.18.1 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
    typing-extensions==4.16.0 typing-inspection==0.4.5)
IMPORTS='import expectation.modules.eprocessupdater, expectation.modules.merging, expectation.modules.martingales'

NAME=setup_expectation_env
MINOR=3.12
PY_VAR=PY312
MISSING="expectation needs Python >= 3.12. Install one (pyenv install 3.12.1, apt-get install python3.12-venv) and \
rerun, or set PY312=/path/to/python3.12"
# shellcheck source=scripts/side_venv.sh
source "$ROOT/scripts/side_venv.sh"

side_venv_install
"$PY" -c "$IMPORTS" || die "the comparison's imports fail in $VENV"
side_venv_ready "expectation 0.6.1"
