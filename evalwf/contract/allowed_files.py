"""Where a worker takes code from: a task's Snakefile and config files must be files inside one of the workflow
directories the worker allows (its --allow-workflow directories; by default the directory it was started in, the
workflow directory), and in no place that jobs, Snakemake or the queue write.

The worker refuses a task naming any other (evalwf/worker/job_payload.py: the task is failed with the reason,
on every worker started the same way, also when the submitter's --retries resubmits it). The submitter applies
this same rule to every task before creating it (snakemake_executor_plugin_labtasker), so a campaign the workers
would refuse stops at once, saying how to fix it, instead of failing each of its tasks on the workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

# Inside a workflow directory, written by Snakemake (its state, job logs, the workers' logs) and by the embedded
# Labtasker server: never code.
WRITTEN_BY_TOOLS = (".snakemake", ".labtasker")


def inside(path: str, allowed: Iterable[str]) -> bool:
    """Whether `path`, symlinks resolved, is one of the `allowed` directories (given resolved) or below one."""
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip("/") + "/") for root in allowed)


def written_by_tools(workdir: str) -> list[str]:
    return [os.path.join(workdir, name) for name in WRITTEN_BY_TOOLS]


def code_file_refusal(path: str, what: str, allowed: list[str], written: Iterable[str]) -> str | None:
    """Why a worker allowing `allowed` refuses `path` as the task's `what` ("Snakefile", "config file"), or None.
    `written`: the places that jobs, Snakemake or the queue write."""
    if not inside(path, allowed):
        return f"{what} {path} is not inside an allowed directory ({', '.join(allowed)})"
    if not os.path.isfile(path):
        return f"{what} {path} is not a file here"
    place = next((place for place in written if inside(path, [os.path.realpath(place)])), None)
    if place is not None:
        return (
            f"{what} {path} is inside {place}, which jobs, Snakemake or the queue write: code is never taken from "
            "there (keep Snakefiles and config files with the workflow's code)"
        )
    return None
