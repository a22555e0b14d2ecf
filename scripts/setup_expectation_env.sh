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

say() { printf '[setup_expectation_env] %s\n' "$*"; }
die() {
    printf '[setup_expectation_env] ERROR: %s\n' "$*" >&2
    exit 1
}

is_py312() { [[ -x "$1" ]] && [[ "$("$1" -c 'import sys; print(sys.version_info[:2] == (3, 12))' 2>/dev/null)" == True ]]; }

find_py312() {
    if [[ -n "${PY312:-}" ]]; then
        is_py312 "$PY312" || die "PY312=$PY312 is not a Python 3.12 interpreter"
        echo "$PY312"
        return
    fi
    local candidate
    candidate="$(command -v python3.12 || true)"
    if [[ -n "$candidate" ]] && is_py312 "$candidate"; then
        echo "$candidate"
        return
    fi
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
    for candidate in $(ls -d "$pyenv_root"/versions/3.12.* 2>/dev/null | sort -V -r); do
        if is_py312 "$candidate/bin/python3.12"; then
            echo "$candidate/bin/python3.12"
            return
        fi
    done
    die "no Python 3.12 found (PY312 unset, no python3.12 on PATH, none under $pyenv_root/versions): expectation \
needs Python >= 3.12. Install one (pyenv install 3.12.1, apt-get install python3.12-venv) and rerun, or set \
PY312=/path/to/python3.12"
}

PY="$VENV/bin/python"
STAMP="$VENV/.installed"
if [[ -x "$PY" ]] && ! is_py312 "$PY"; then
    die "$VENV exists but is not a Python 3.12 venv ($("$PY" --version 2>&1)); remove it and rerun"
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "${PINS[*]}" ]]; then
    say "venv: $VENV already holds ${PINS[*]}"
    exit 0
fi
if [[ ! -x "$PY" ]]; then
    BASE="$(find_py312)"
    say "venv: creating $VENV with $BASE"
    "$BASE" -m venv "$VENV" || die "$BASE -m venv $VENV failed (Debian: apt-get install python3.12-venv)"
fi
say "pip: installing ${PINS[*]} (--no-deps: exactly these)"
"$PY" -m pip install --disable-pip-version-check --no-input -q --no-deps "${PINS[@]}" ||
    die "pip install failed (is the package registry reachable?)"
"$PY" -c "$IMPORTS" || die "the comparison's imports fail in $VENV"
printf '%s' "${PINS[*]}" >"$STAMP"
say "venv: $VENV ($("$PY" -c 'import sys; print(sys.version.split()[0])'), expectation 0.6.1) ready"
