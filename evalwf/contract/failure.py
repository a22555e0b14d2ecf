"""How a failed job says why: the first line a user reads is the cause, the exception's own type and text
(`ValueError: policy returned actions of shape (10, 6); LIBERO needs [..., 7]`), the next one where the full log is.

The cause travels as a small JSON file ({"type", "message"}), never parsed out of a traceback:
- a simulator step (`python -m evalwf.job.sim_step --cause-file F`, in the benchmark's own interpreter) writes the
  exception it fails with, and the job body raises with that cause (evalwf.job.interpreter);
- a job body writes the exception it fails with to the file its worker names in its job step's context
  (evalwf.contract.job_step_context: `cause_file`; evalwf.rules.jobs);
- the worker reads it after a failed job step and reports `failure_text(cause, log, details)` as the task's error.
The submitter (failure_message) and `evalwf status` show `excerpt(...)` of the task's last error.

Light (standard library only, Python 3.10): the simulator's interpreter imports this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

from evalwf.common.atomic import atomic_write_text

LOG_PREFIX = "full log: "  # the second line of a worker's failure text
MAX_CAUSE_CHARS = 1000  # a task's error is bounded: the cause never pushes the rest out


def cause_of(error: BaseException) -> str:
    """`Type: text` of an exception, or the cause it carries from a step that ran elsewhere (`.cause`)."""
    carried = getattr(error, "cause", None)
    if isinstance(carried, str) and carried:
        return carried
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def write_cause(path: str | os.PathLike[str], error: BaseException) -> None:
    """Record why this step fails, for whoever started it (best effort: the traceback is in the log anyway)."""
    cause = cause_of(error)
    kind, _, message = cause.partition(": ")
    try:
        atomic_write_text(path, json.dumps({"type": kind, "message": message[:MAX_CAUSE_CHARS]}))
    except OSError:
        pass


def read_cause(path: str | os.PathLike[str]) -> str | None:
    """`Type: text` as write_cause recorded it, or None (nothing recorded: the step died without an exception)."""
    try:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))
        kind, message = str(recorded["type"]), str(recorded.get("message") or "")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return f"{kind}: {message}" if message else kind


def failure_text(cause: str, log: str, details: str = "") -> str:
    """A worker's error for a failed job: the cause, then where the full log is, then anything else."""
    lines = [" ".join(cause.split())[:MAX_CAUSE_CHARS], LOG_PREFIX + log]
    return "\n".join(lines + ([details.rstrip()] if details.strip() else []))


class Excerpt(NamedTuple):
    cause: str  # `Type: text`
    log: str | None  # where the full log is (host:path), when the error names it
    details: str  # the rest of the error's text


def excerpt(error_type: str, message: str) -> Excerpt:
    """What to show of a task's last error: a worker's failure_text as it is; any other error (Labtasker's own,
    such as HeartbeatTimeout, or a worker's refusal) as `error_type: first line`."""
    lines = (message or "").strip().splitlines()
    if len(lines) >= 2 and lines[1].startswith(LOG_PREFIX):
        return Excerpt(lines[0], lines[1][len(LOG_PREFIX) :], "\n".join(lines[2:]))
    first = lines[0] if lines else ""
    return Excerpt(f"{error_type}: {first}" if first else error_type, None, "\n".join(lines[1:]))
