"""Policy affinity without a claim filter. Labtasker's claim takes only a route, so a batch of a
campaign with several policies is submitted on two routes: the submission's route and an affinity route named
after its policy identity. A worker whose policy server has a policy loaded claims on that policy's affinity
route first and falls back to the plain route when nothing is queued there, so it switches policies (stops the
old server, starts the new one) only when no batch of the loaded policy is left.

Shared by the submitter (task_routes) and the workers (evalwf.worker.queue_client.claim_preferring)."""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evalwf.contract.task_payload import TaskArgs

AFFINITY_ENV = "EVAL_POLICY_AFFINITY"  # "0" on a worker: claim on the plain route only (for comparison)


def affinity_route(route: str, identity: str) -> str:
    """`<route>.p-<12 hex of the identity>`: a valid Labtasker route ([A-Za-z0-9][A-Za-z0-9._-]{0,127})."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"{route[:110]}.p-{digest}"


def task_routes(route: str, args: TaskArgs) -> list[str]:
    """The routes of a task (its payload `args`): its route, plus its policy's affinity route when it is a batch
    of a campaign with several policies (the workflow then names the policy as a {policy} wildcard). A campaign of
    one policy keeps the plain route alone, as before."""
    identity = args.get("policy_identity")
    several = any("policy" in wildcards for wildcards in args.get("wildcards") or [])
    return sorted([route, affinity_route(route, identity)]) if identity and several else [route]


def affinity_enabled() -> bool:
    return os.environ.get(AFFINITY_ENV, "1") != "0"
