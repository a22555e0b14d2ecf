"""Which queued task a free worker claims first: Labtasker claims by priority (higher first), then FIFO.

`longest-first` (the default) gives each batch its expected seconds of work as its priority (the workflow
declares it as the `expected_cost_s` resource, the same figure `evalwf plan` shows), so long batches start early
and the campaign does not end waiting for one long batch claimed last. Jobs without an expected cost (building
a manifest, which unblocks the batches of a task) come before every batch. `fifo` keeps submission order.

An adaptive sweep's batches of round r (the `adaptive_round` resource, 0 for every other batch) sit ROUND_STEP
lower per round, whatever their cost: the round a decision waits for is claimed before the rounds that run ahead
of it (early starts, speculative rounds), so they fill idle workers without delaying the decision
(docs/adaptive.md, "Speculative rounds").
"""

from __future__ import annotations

from typing import Any

from evalwf.contract import EXPECTED_COST_RESOURCE, ROUND_RESOURCE

MODES = ("longest-first", "fifo")
UNBLOCKING_PRIORITY = 1_000_000_000  # above any batch's expected seconds
MAX_COST_PRIORITY = UNBLOCKING_PRIORITY - 1
ROUND_STEP = 10_000_000  # more than any batch's expected seconds (116 days): a later round never overtakes


def _resource(job: Any, name: str) -> int:
    resources = getattr(job, "resources", None)
    try:
        value = resources.get(name, 0) if hasattr(resources, "get") else 0
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _expected_cost(job: Any) -> int:
    return _resource(job, EXPECTED_COST_RESOURCE)


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
    earliest = min(_resource(j, ROUND_RESOURCE) for j in jobs)
    return base + min(sum(costs), MAX_COST_PRIORITY) - earliest * ROUND_STEP
