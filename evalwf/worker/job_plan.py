"""The jobs of a campaign's plan that a worker may be asked to run, by rule and wildcards, with their outputs and
policy, and the places where the campaign's jobs write.

A Snakemake job step removes its target jobs' outputs and logs before it runs them (and a rule refuses a wildcard
it does not plan only afterwards), so a task's target jobs are matched against these before any job step starts:
a task can only name jobs of the campaign that its own config files define (invariant 6).

The rule names and wildcard names mirror workflow/rules/evaluate.smk and workflow/rules/manifests.smk, whose
output paths are the plan's own (`PolicyCampaign.batch_path`, `Campaign.manifest_path`); every campaign test that
goes through real workers would fail if the two disagreed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from evalwf.plan.campaign import BatchPlan, Campaign, PolicyCampaign, TaskPlan
from evalwf.plan.manifest import load_manifest
from evalwf.plan.results import validate_batch_result
from evalwf.policy.spec import PolicySpec

Wildcards = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class PlannedJob:
    rule: str
    outputs: tuple[str, ...]  # absolute
    policy: PolicySpec | None  # the policy a batch evaluates (None: a manifest job needs no policy server)
    # raises ValueError (ManifestError, ResultValidationError) naming the file when an output is not valid: the
    # layered validation that aggregation applies
    check: Callable[[], object] = field(compare=False, repr=False)


def _absolute(path: str | os.PathLike[str], workdir: str) -> str:
    return os.path.normpath(os.path.join(workdir, os.fspath(path)))


def _check_batch(member: PolicyCampaign, batch: BatchPlan, plan: TaskPlan, workdir: str) -> object:
    manifest = load_manifest(_absolute(plan.manifest_path, workdir), plan.manifest_hash)
    return validate_batch_result(_absolute(batch.path, workdir), member.expectation(batch, manifest))


def planned_jobs(campaign: Campaign, workdir: str) -> dict[tuple[str, Wildcards], PlannedJob]:
    """(rule, wildcards) -> the job: every batch of every policy of the campaign and every manifest it seals."""
    jobs: dict[tuple[str, Wildcards], PlannedJob] = {}
    for member in campaign.policy_campaigns():
        policy = {"policy": member.policy.name} if campaign.multi else {}
        for plan in member.tasks:
            ref = plan.ref
            for batch in plan.batches:
                wildcards = {"run": campaign.run, **policy, "benchmark": ref.benchmark, "suite": ref.suite}
                wildcards.update(task=ref.task, batch=batch.episodes.label)
                check = partial(_check_batch, member, batch, plan, workdir)
                job = PlannedJob("evaluate_batch", (_absolute(batch.path, workdir),), member.policy, check)
                jobs[(job.rule, frozenset(wildcards.items()))] = job
    for path, plan in campaign.manifests().items():
        wildcards = {"run": campaign.run, "benchmark": plan.ref.benchmark, "scope": plan.scope, "task": plan.ref.task}
        wildcards["digest"] = plan.manifest_hash
        check = partial(load_manifest, _absolute(path, workdir), plan.manifest_hash)
        job = PlannedJob("plan_manifest", (_absolute(path, workdir),), None, check)
        jobs[(job.rule, frozenset(wildcards.items()))] = job
    return jobs


def written_directories(results_dir: str, manifest_cache: str, workdir: str) -> list[str]:
    """Where a campaign's jobs write (its results and its manifest cache), absolute: never a place for code."""
    return [_absolute(results_dir, workdir), _absolute(manifest_cache, workdir)]
