"""Which interpreter runs a benchmark's simulator (`benchmarks.<name>.python`, invariant 9), and the environment a
simulator step gets there.

A benchmark section may name the interpreter of its simulator's own environment (a python executable, or an
environment prefix holding bin/python; absolute or relative to the project root). Its manifests and batches then
run there (evalwf.job.interpreter), with this checkout on PYTHONPATH; without the key they run in the workflow's own
interpreter, in process. The plan needs it too: what is installed there is part of the episodes
(evalwf.plan.environment).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from evalwf.benchmark.adapter import get_adapter
from evalwf.common.errors import SimulatorEnvError
from evalwf.common.paths import PROJECT_ROOT


def resolve_interpreter(value: str | None, benchmark: str) -> str | None:
    """The python executable of `benchmarks.<benchmark>.python`, or None (run in process).

    Symlinks are kept as they are: a venv's bin/python is a link to the base interpreter, and resolving it would
    lose the venv."""
    if value is None:
        return None
    expanded = Path(os.path.expandvars(os.path.expanduser(value)))
    path = expanded if expanded.is_absolute() else PROJECT_ROOT / expanded
    hint = get_adapter(benchmark).environment_setup
    where = f"config key 'benchmarks.{benchmark}.python' = {value!r}"
    if path.is_dir():
        found = next((p for p in (path / "bin" / "python", path / "bin" / "python3") if p.exists()), None)
        if found is None:
            raise SimulatorEnvError(
                f"{where}: {path} is a directory without bin/python on {socket.gethostname()}; {hint}"
            )
        path = found
    if not path.exists():
        raise SimulatorEnvError(f"{where}: {path} does not exist on {socket.gethostname()}; {hint}")
    if not os.access(path, os.X_OK):
        raise SimulatorEnvError(f"{where}: {path} is not executable")
    return str(path)


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a simulator step: ours, with this checkout first on PYTHONPATH (the simulator's
    environment need not have this package installed) and unbuffered output (its log lines arrive as written)."""
    env = dict(os.environ if base is None else base)
    paths = [str(PROJECT_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONHOME", None)
    return env
