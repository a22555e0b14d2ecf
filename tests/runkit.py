"""Runs made to order: real configs, sealed manifests and batch files with chosen outcomes.

Reporting tests need exact success counts (0/50, 50/50, ...) without running episodes: the files written here go
through the same sealing and validation as a real run's, only the per-episode success flags are chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import standin_config

from evalwf.benchmark.adapter import get_adapter
from evalwf.benchmark.rollout import episode_record
from evalwf.plan.campaign import BatchPlan, Campaign, PolicyCampaign
from evalwf.plan.config import validate_config
from evalwf.plan.manifest import load_manifest, seal_manifest
from evalwf.plan.results import build_batch_result, write_batch_result

Outcome = Callable[[str, str, int], bool]  # (suite, task, episode index) -> success
Extra = Callable[[str, str, int], dict[str, Any]]  # (suite, task, episode index) -> the record's extra fields


def seal_manifests(campaign: Campaign | PolicyCampaign) -> None:
    adapter = get_adapter("standin")
    for path, plan in campaign.manifests().items():
        seal_manifest(adapter, plan.definition, plan.scope, plan.ref.task, path, campaign.config.manifest_cache)


def write_batch(campaign: PolicyCampaign, batch: BatchPlan, success: Outcome, extra: Extra | None = None) -> None:
    """One stand-in batch file of `campaign`'s policy, its episodes' success from `success`."""
    plan = campaign.task_plan(batch.ref.benchmark, batch.ref.suite, batch.ref.task)
    manifest = load_manifest(plan.manifest_path, plan.manifest_hash)
    records = [
        episode_record(
            index=i,
            seed=manifest["episodes"][i]["seed"],
            setup={"instruction": manifest["episodes"][i]["instruction"]},
            success=success(plan.ref.suite, plan.ref.task, i),
            steps=7,
            duration_s=0.5,
            extra=extra(plan.ref.suite, plan.ref.task, i) if extra else None,
        )
        for i in batch.episodes.indices()
    ]
    write_batch_result(
        batch.path,
        build_batch_result(
            run=campaign.run,
            benchmark="standin",
            suite=plan.ref.suite,
            task=plan.ref.task,
            episodes=batch.episodes,
            manifest_hash=manifest["manifest_hash"],
            policy_identity=campaign.policy.identity,
            records=records,
            started_at="2026-01-01T00:00:00+00:00",
            finished_at="2026-01-01T00:00:05+00:00",
            duration_s=5.0,
        ),
    )


def fabricate_run(
    tmp_path: Path, success: Outcome, *, skip: set[str] | None = None, extra: Extra | None = None, **overrides: Any
) -> PolicyCampaign:
    """Write every batch of a stand-in campaign of one policy (minus the batch labels in `skip`) with outcomes from
    `success` and, with `extra`, each episode record's extra fields (a recorded video, say); its policy's campaign."""
    campaign = Campaign(validate_config(standin_config(tmp_path, **overrides))).single()
    seal_manifests(campaign)
    for plan in campaign.tasks:
        for batch in plan.batches:
            if not (skip and f"{plan.ref.task}/{batch.episodes.label}" in skip):
                write_batch(campaign, batch, success, extra)
    return campaign


def sweep_config(tmp_path: Path, policies: list[str], **overrides: Any) -> dict[str, Any]:
    """A stand-in campaign of several policies (`policies`, the stand-in server each), other keys as given."""
    config = standin_config(tmp_path, **overrides)
    policy = config.pop("policy")
    config["policies"] = [{**policy, "name": name} for name in policies]
    return config


def fabricate_sweep(
    tmp_path: Path,
    policies: list[str],
    written: Callable[[str, BatchPlan], bool],
    success: Callable[..., bool],
    **overrides: Any,
) -> Campaign:
    """A sweep of stand-in policies with its manifests sealed and the batches `written(policy, batch)` picks
    written, each episode's success from `success(policy, suite, task, index)`; the campaign."""
    campaign = Campaign(validate_config(sweep_config(tmp_path, policies, **overrides)))
    seal_manifests(campaign)
    for name, member in campaign.members.items():
        for batch in member.batches():
            if written(name, batch):
                write_batch(member, batch, lambda suite, task, index, name=name: success(name, suite, task, index))
    return campaign
