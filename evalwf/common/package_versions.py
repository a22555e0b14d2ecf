"""The Python version of an interpreter and the versions of distributions installed there, read from their
metadata directories on sys.path: nothing is imported, nothing written.

In process (`interpreter_versions`), or in another interpreter as `python -B -c <this file's source> '<names as a
JSON list>'`, which prints the same as JSON (evalwf.plan.environment). It runs at every parse of the workflow,
job steps included, so it reads the `*.dist-info` / `*.egg-info` directories itself, as importlib.metadata.version
finds them (the first one on sys.path wins), without importing importlib.metadata (a tenth of a second in a fresh
interpreter). Standard library only: it runs on any Python 3 a benchmark uses. Its `__main__` is internal (the
parse-time probe above), never a user's command.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

METADATA_FILES = {"dist-info": "METADATA", "egg-info": "PKG-INFO"}


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _version_in(path: str, kind: str) -> str | None:
    """The Version: header of a distribution's metadata (a directory, or an egg-info file)."""
    source = os.path.join(path, METADATA_FILES[kind]) if os.path.isdir(path) else path
    try:
        with open(source, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first blank line
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def installed_versions(names: list[str]) -> dict[str, str | None]:
    """Distribution name -> its installed version (importlib.metadata.version's answer), None where it is not
    installed."""
    wanted = {_normalized(name): name for name in names}
    versions: dict[str, str | None] = dict.fromkeys(names)
    for entry in sys.path:
        try:
            listing = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for item in listing:
            stem, _, kind = item.rpartition(".")
            name = wanted.get(_normalized(stem.split("-")[0])) if kind in METADATA_FILES else None
            if name is not None and versions[name] is None:
                versions[name] = _version_in(os.path.join(entry or ".", item), kind)
    return versions


def interpreter_versions(names: list[str]) -> dict[str, Any]:
    return {"python": sys.version.split()[0], "packages": installed_versions(names)}


if __name__ == "__main__":
    print(json.dumps(interpreter_versions(json.loads(sys.argv[1]))))
