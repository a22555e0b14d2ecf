"""A worker's claim with policy affinity, on a real Labtasker server: the loaded policy's batch first, FIFO order
with affinity switched off on the worker (EVAL_POLICY_AFFINITY=0, what scripts/bench_affinity.py compares)."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import secrets

import pytest
from labtasker_testkit import client, labtasker_url, queue

from evalwf.contract.affinity import AFFINITY_ENV, task_routes
from evalwf.worker.queue_client import claim_preferring

ROUTE = "default"


def run_id() -> str:
    return f"r_{secrets.token_hex(6)}"  # unique on the server: Labtasker refuses a run id in use by another claim


def submit_batch(client, name: str, identity: str) -> str:
    """A batch task of a campaign of several policies, on the routes the submitter gives it."""
    args = {"policy_identity": identity, "wildcards": [{"policy": name}]}
    return client.submit_task(args, name=name, max_attempts=1, routes=task_routes(ROUTE, args))


@pytest.mark.parametrize(("affinity", "first"), [("1", "b"), ("0", "a")])
def test_the_loaded_policys_batch_is_claimed_first_unless_affinity_is_off(client, monkeypatch, affinity, first):
    monkeypatch.setenv(AFFINITY_ENV, affinity)
    submit_batch(client, "a", "policy-a@1")  # queued first: FIFO on the plain route claims it first
    submit_batch(client, "b", "policy-b@1")
    claimed = claim_preferring(client, route=ROUTE, run_id=run_id(), loaded="policy-b@1")
    assert claimed is not None and claimed.task.name == first
    other = claim_preferring(client, route=ROUTE, run_id=run_id(), loaded="policy-b@1")
    assert other is not None and other.task.name == {"a": "b", "b": "a"}[first], "the plain route has the other"
    assert claim_preferring(client, route=ROUTE, run_id=run_id(), loaded="policy-b@1") is None
