"""Atomic file publication: readers see the old file or the complete new one, never a torn write."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask_mode() -> int:
    """Regular-file permissions under the current umask (mkstemp alone would give 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _naming(error: OSError, target: Path) -> OSError:
    """The same error naming the file it was for: a full disk otherwise reads only '[Errno 28] No space left on
    device', with no word of which file (the temp file is gone, so the target is the one to name)."""
    if error.filename is not None or error.errno is None:
        return error
    return OSError(error.errno, error.strerror, str(target))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _umask_mode())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:
            raise _naming(error, target) from error
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n")


def publish_once(path: str | os.PathLike[str], text: str) -> bool:
    """Publish text at path unless a file is already there (sealed files are never rewritten).

    Uses a hard link from a complete temp file so that two concurrent publishers cannot both win.
    Returns True if this call published the file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _umask_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        return True
    except OSError as error:
        if error.filename is None:
            raise _naming(error, target) from error
        raise
    finally:
        Path(tmp).unlink(missing_ok=True)
