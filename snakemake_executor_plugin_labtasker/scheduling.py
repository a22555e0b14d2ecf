"""Which queued task a free worker claims first: Labtasker claims by priority (higher first), then FIFO.

`longest-first` (the default) gives each batch its expected seconds of work as its priority (the workflow
declares it as the `expected_cost_s` resource, the same figure `evalwf plan` shows), so long batches start early
and the campaign does not end waiting for one long batch claimed last. Jobs without an expected cost (building
a manifest, which unblocks the batches of a task) come before every batch. `fifo` keeps submission order.
"""

from __future__ import annotations

from typing import Any

from evalwf.contract import EXPECTED_COST_RESOURCE

MODES = ("longest-first", "fifo")
UNBLOCKING_PRIORITY = 1_000_000_000  # above any batch's expected seconds
MAX_COST_PRIORITY = UNBLOCKING_PRIORITY - 1


def _expected_cost(job: Any) -> int:
    resources = getattr(job, "resources", None)
    try:
        value = resources.get(EXPECTED_COST_RESOURCE, 0) if hasattr(resources, "get") else 0
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def task_priority(job: Any, mode: str, base: int = 0) -> int:
    """The Labtasker priority of a (possibly grouped) job under `mode`, offset by the profile's `base`."""
    if mode not in MODES:
        raise ValueError(f"unknown scheduling mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "fifo":
        return base
    jobs = list(job.jobs) if job.is_group() else [job]
    costs = [_expected_cost(j) for j in jobs]
    if not any(costs):
        return base + UNBLOCKING_PRIORITY
    return base + min(sum(costs), MAX_COST_PRIORITY)
