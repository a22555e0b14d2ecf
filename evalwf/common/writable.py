"""Refuse a campaign whose output directories cannot be written, before any job runs: otherwise Snakemake
fails deep inside (a long traceback naming no path) or, worse, a worker evaluates a batch it cannot save."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from evalwf.common.errors import ConfigError


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def _why_not_writable(directory: Path) -> str | None:
    """Why files cannot be created in `directory` (an existing directory), None when they can. Asked of the kernel
    (access(2) with the effective ids: it counts root, ACLs and a read-only mount, which permission bits do not
    tell) and not tried with a file: it is asked while Snakemake parses the workflow, and a dry run writes nothing."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return os.strerror(errno.EROFS)
    except OSError as error:
        return error.strerror or str(error)
    effective = os.access in os.supports_effective_ids
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=effective):
        return os.strerror(errno.EACCES)
    return None


def check_writable(key: str, directory: str | os.PathLike[str]) -> None:
    """Raise ConfigError naming `key` and `directory` unless files can be created there (or where it will be
    created), without writing anything."""
    target = Path(directory).absolute()
    existing = _nearest_existing(target)
    fix = f"set {key} to a directory you can write, or fix the permissions"
    if not existing.is_dir():
        raise ConfigError(f"config key '{key}': {target} cannot be created: {existing} is not a directory; {fix}")
    reason = _why_not_writable(existing)
    if reason is not None:
        raise ConfigError(f"config key '{key}': the directory {target} is not writable ({reason} at {existing}); {fix}")
