"""A script of scripts/ imported as a module, for the tests of its functions: scripts are not a package, and some
import their siblings (bench_round_barrier imports bench_adaptive), so scripts/ goes on the path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(stem: str, name: str | None = None) -> ModuleType:
    """scripts/<stem>.py as the module `name` (default: the stem)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name or stem, SCRIPTS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
