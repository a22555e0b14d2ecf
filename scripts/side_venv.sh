# Sourced by scripts/setup_py310_env.sh and scripts/setup_expectation_env.sh: a side environment of one Python minor
# version holding exactly a pinned list of packages (--no-deps), built idempotently (the venv keeps a stamp of its
# pins). The sourcing script sets:
#   NAME     its name, the prefix of every line it prints
#   MINOR    the Python version, as 3.10
#   VENV     where the venv lives
#   PINS     the packages, an array of name==version
#   PY_VAR   the variable naming an interpreter to use (PY310), else python$MINOR on PATH, else pyenv's newest
#   MISSING  what to do when none is found (appended to the error)
# then calls side_venv_install (returns only when it installed something; exits 0 when the venv already held PINS),
# checks what it needs with "$PY", and calls side_venv_ready.

say() { printf '[%s] %s\n' "$NAME" "$*"; }
die() {
    printf '[%s] ERROR: %s\n' "$NAME" "$*" >&2
    exit 1
}

is_minor() {
    [[ -x "$1" ]] && [[ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$MINOR" ]]
}

find_interpreter() {
    local given="${!PY_VAR:-}"
    if [[ -n "$given" ]]; then
        is_minor "$given" || die "$PY_VAR=$given is not a Python $MINOR interpreter"
        echo "$given"
        return
    fi
    local candidate
    candidate="$(command -v "python$MINOR" || true)"
    if [[ -n "$candidate" ]] && is_minor "$candidate"; then
        echo "$candidate"
        return
    fi
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
    for candidate in $(ls -d "$pyenv_root"/versions/"$MINOR".* 2>/dev/null | sort -V -r); do
        if is_minor "$candidate/bin/python$MINOR"; then
            echo "$candidate/bin/python$MINOR"
            return
        fi
    done
    die "no Python $MINOR found ($PY_VAR unset, no python$MINOR on PATH, none under $pyenv_root/versions): $MISSING"
}

side_venv_install() {
    PY="$VENV/bin/python"
    STAMP="$VENV/.installed"
    if [[ -x "$PY" ]] && ! is_minor "$PY"; then
        die "$VENV exists but is not a Python $MINOR venv ($("$PY" --version 2>&1)); remove it and rerun"
    fi
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "${PINS[*]}" ]]; then
        say "venv: $VENV already holds ${PINS[*]}"
        exit 0
    fi
    if [[ ! -x "$PY" ]]; then
        local base
        base="$(find_interpreter)"
        say "venv: creating $VENV with $base"
        "$base" -m venv "$VENV" || die "$base -m venv $VENV failed (Debian: apt-get install python$MINOR-venv)"
    fi
    say "pip: installing ${PINS[*]} (--no-deps: exactly these)"
    "$PY" -m pip install --disable-pip-version-check --no-input -q --no-deps "${PINS[@]}" ||
        die "pip install failed (is the package registry reachable?)"
}

side_venv_ready() {
    printf '%s' "${PINS[*]}" >"$STAMP"
    say "venv: $VENV ($("$PY" -c 'import sys; print(sys.version.split()[0])'), $1) ready"
}
