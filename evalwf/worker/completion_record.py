"""A job step's success, recorded by its worker next to the task's logs before the worker reports it.

When that report is lost (a server outage outlasting the lease), the task comes back to the queue although its
batch was evaluated: Labtasker requeues it with a HeartbeatTimeout naming the lost run, or the submitter requeues
it naming that run in the task's metadata (ADOPT_RUN_METADATA). The worker that claims it then finds this record:
the run finished, and its outputs are still the files it wrote (same size and modification time) and validate, so
the task is completed with that run's result and never evaluated again (invariant 7). A task without such a record
(a forced rerun creates a new task; a real failure writes none) runs as usual.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from evalwf.common.atomic import atomic_write_text
from evalwf.contract import ADOPT_RUN_METADATA
from evalwf.worker.queue_client import TaskResult


def record_path(workdir: str, task_id: str, run_id: str) -> Path:
    """Beside the run's log (<workdir>/.snakemake/labtasker/tasks/<task>/<run>.log)."""
    return Path(workdir) / ".snakemake" / "labtasker" / "tasks" / task_id / f"{run_id}.done.json"


def _stamp(path: str) -> list[int]:
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns]


def write_record(workdir: str, task_id: str, run_id: str, outputs: list[str], result: TaskResult) -> None:
    """Record that run `run_id` of the task succeeded with these outputs (published atomically)."""
    path = record_path(workdir, task_id, run_id)
    record = {"task": task_id, "run": run_id, "outputs": {p: _stamp(p) for p in outputs}, "result": result}
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def lost_run(task: Any) -> str | None:
    """The run of this task whose lease expired while it held the task (its report may have been lost)."""
    error = getattr(task, "last_error", None)
    if error is not None and getattr(error, "type", None) == "HeartbeatTimeout" and getattr(error, "run_id", None):
        return str(error.run_id)
    named = (getattr(task, "metadata", None) or {}).get(ADOPT_RUN_METADATA)
    return named if isinstance(named, str) and named else None


def recorded_result(workdir: str, task_id: str, run_id: str, outputs: list[str]) -> tuple[TaskResult | None, str]:
    """(the run's result, "") when it recorded its success and its outputs are still the files it wrote; else
    (None, why not)."""
    path = record_path(workdir, task_id, run_id)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"run {run_id} recorded no success ({path} does not exist)"
    except (OSError, ValueError) as error:
        return None, f"its record {path} is unreadable: {error}"
    recorded = record.get("outputs") if isinstance(record, dict) else None
    if not isinstance(recorded, dict) or sorted(recorded) != sorted(outputs):
        return None, f"its record {path} names other outputs"
    for output in outputs:
        try:
            if _stamp(output) != recorded[output]:
                return None, f"{output} changed since run {run_id} wrote it"
        except OSError as error:
            return None, f"{output}: {error.strerror}"
    result = record.get("result")
    return (result if isinstance(result, dict) else {}), ""
