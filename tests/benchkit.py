"""Test helpers any benchmark can use, whatever its name (docs/adding-a-benchmark.md, "Tests"): a campaign of one
benchmark, a policy server for it, every batch evaluated in this process through the workflow's own job bodies,
and the two properties every benchmark must have (records independent of the batching, the caller's RNGs left
alone). The stand-in's own tests use them, so they stay working."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from evalwf.contract.job_step_context import JOB_STEP_CONTEXT_ENV, JobStepContext
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.policy.spec import PolicySpec
from evalwf.rules import jobs
from evalwf.worker.policy_server import GuardedPolicyServer

# (suite, task, episode index) -> the episode's record without its wall time
Records = dict[tuple[str, str, int], dict[str, Any]]


def campaign_config(
    results_dir: Path, benchmark: str, section: Mapping[str, Any], policy: Mapping[str, Any], **keys: Any
) -> dict[str, Any]:
    """A campaign of `benchmark` alone (`section` is its `benchmarks.<name>` block) with one `policy` block,
    writing under `results_dir`; `keys` are further top-level config keys."""
    config: dict[str, Any] = {
        "run": "t",
        "results_dir": str(results_dir / "results"),
        "manifest_cache": str(results_dir / "cache"),
        "policy": dict(policy),
        "benchmarks": {benchmark: dict(section)},
    }
    config.update(keys)
    return config


@contextmanager
def served_policy(policy: Mapping[str, Any], log_dir: Path, slots: int = 1) -> Iterator[GuardedPolicyServer]:
    """The policy block's server, started and stopped the way a worker does it (its endpoint: `.endpoint`)."""
    with GuardedPolicyServer(log_dir=log_dir, slots=slots) as server:
        server.ensure(PolicySpec.from_config(dict(policy)))
        yield server


@contextmanager
def _endpoint(endpoint: str, identity: str) -> Iterator[None]:
    """The policy endpoint a worker hands its job steps (in their JobStepContext, with the identity it serves), for
    the duration of the block."""
    before = os.environ.get(JOB_STEP_CONTEXT_ENV)
    os.environ.update(JobStepContext(policy_identity=identity, endpoint=endpoint).to_env())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(JOB_STEP_CONTEXT_ENV, None)
        else:
            os.environ[JOB_STEP_CONTEXT_ENV] = before


def evaluate_campaign(config: dict[str, Any], endpoint: str, slots: int = 1) -> Records:
    """Seal every task's manifest, then evaluate every planned batch (`slots` at a time) against the policy at
    `endpoint`, as the workflow's rules do (in the benchmark's own interpreter where `python` names one)."""
    campaign = Campaign(validate_config(config)).single()
    with _endpoint(endpoint, campaign.policy.identity):
        for plan in campaign.tasks:
            jobs.seal_task_manifest(campaign, *plan.manifest_key, plan.manifest_path)
        batches = [batch for plan in campaign.tasks for batch in plan.batches]
        with ThreadPoolExecutor(slots) as pool:
            list(pool.map(lambda batch: jobs.evaluate_batch(campaign, *batch.key, batch.path), batches))
    records: Records = {}
    for batch in batches:
        for record in json.loads(Path(batch.path).read_text())["episodes"]:
            record.pop("duration_s")
            records[(batch.ref.suite, batch.ref.task, record["index"])] = record
    return records


def records_by_batch_size(
    results_dir: Path,
    benchmark: str,
    section: Mapping[str, Any],
    policy: Mapping[str, Any],
    endpoint: str,
    sizes: tuple[int, ...],
) -> dict[int, Records]:
    """The same campaign evaluated once per batch size (each in its own results folder): a benchmark whose
    episodes depend only on what defines them gives equal records for every size."""
    return {
        size: evaluate_campaign(
            campaign_config(results_dir / f"batch{size}", benchmark, {**section, "batch_size": size}, policy), endpoint
        )
        for size in sizes
    }


def leaves_caller_rngs_alone(run: Callable[[], object]) -> bool:
    """Whether `run()` leaves numpy's and Python's global generators where it found them."""
    np.random.seed(11)
    random.seed(11)
    before_np, before_py = np.random.get_state()[1].copy(), random.getstate()
    run()
    return bool((np.random.get_state()[1] == before_np).all()) and random.getstate() == before_py
