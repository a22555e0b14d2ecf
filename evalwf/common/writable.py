"""Refuse a campaign whose output directories cannot be written, before any job runs: otherwise Snakemake
fails deep inside (a long traceback naming no path) or, worse, a worker evaluates a batch it cannot save."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from evalwf.common.errors import ConfigError


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def check_writable(key: str, directory: str | os.PathLike[str]) -> None:
    """Raise ConfigError naming `key` and `directory` unless files can be created there (or where it will be
    created). Tried for real with a temporary file: permission bits say nothing to root or on read-only mounts."""
    target = Path(directory).absolute()
    existing = _nearest_existing(target)
    fix = f"set {key} to a directory you can write, or fix the permissions"
    if not existing.is_dir():
        raise ConfigError(f"config key '{key}': {target} cannot be created: {existing} is not a directory; {fix}")
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-test-", dir=existing)
    except OSError as error:
        raise ConfigError(
            f"config key '{key}': the directory {target} is not writable ({error.strerror} at {existing}); {fix}"
        ) from None
    os.close(handle)
    os.unlink(probe)
