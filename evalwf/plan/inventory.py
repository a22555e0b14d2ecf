"""What of a campaign already exists on disk: which batches count as done and which manifests are built.

A batch counts as done only when its result file exists AND passes the same layered validation as the summary;
a file that fails is reported with the validator's reason, since Snakemake would keep it (it exists) and the
summary would reject it: the user has to delete it. Measured batch durations come from the done files only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import registry
from evalwf.benchmark.adapter import TaskRef
from evalwf.common.errors import ManifestError, ResultValidationError
from evalwf.plan.campaign import BatchPlan, PlannedTasks, PolicyCampaign, TaskPlan
from evalwf.plan.manifest import load_manifest
from evalwf.plan.results import CANCELLED_SPECULATIVE, validate_batch_result


@dataclass(frozen=True)
class DoneBatch:
    """A batch whose result file validates, with the wall time it took (result field duration_s)."""

    batch: BatchPlan
    duration_s: float


@dataclass(frozen=True)
class BadBatch:
    """A batch whose result file exists but does not count; `reason` is the validator's message."""

    batch: BatchPlan
    reason: str
    policy_identity: str | None  # as found in the file, when readable


@dataclass
class Inventory:
    """The on-disk state of one campaign, keyed by batch and manifest paths."""

    done: dict[str, DoneBatch] = field(default_factory=dict)
    bad: dict[str, BadBatch] = field(default_factory=dict)
    manifests_missing: set[str] = field(default_factory=set)
    manifests_cached: set[str] = field(default_factory=set)  # missing here, but in the manifest cache

    def is_done(self, batch: BatchPlan) -> bool:
        return batch.path in self.done

    def durations(self) -> dict[TaskRef, list[tuple[float, int]]]:
        """Per task: (seconds, episodes) of every done batch, for the cost model."""
        found: dict[TaskRef, list[tuple[float, int]]] = {}
        for item in self.done.values():
            found.setdefault(item.batch.ref, []).append((item.duration_s, item.batch.episodes.count))
        return found

    def other_policy_identities(self, configured: str) -> dict[str, int]:
        """Identities in existing result files that are not the configured policy -> number of such files."""
        counts: dict[str, int] = {}
        for item in self.bad.values():
            if item.policy_identity and item.policy_identity != configured:
                counts[item.policy_identity] = counts.get(item.policy_identity, 0) + 1
        return counts


def _peek(path: str) -> dict[str, Any]:
    """The file's top-level fields when it is readable JSON, else {} (validation then says what is wrong)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _survey_task(campaign: PolicyCampaign, plan: TaskPlan, found: Inventory, manifests: dict[str, Any]) -> None:
    existing = [batch for batch in plan.batches if Path(batch.path).exists()]
    if not existing:
        return
    if plan.manifest_path not in manifests:  # shared manifests (RoboTwin seen/unseen) are loaded once
        try:
            manifests[plan.manifest_path] = load_manifest(plan.manifest_path, plan.manifest_hash)
        except ManifestError as error:
            manifests[plan.manifest_path] = error
    manifest = manifests[plan.manifest_path]
    for batch in existing:
        if CANCELLED_SPECULATIVE in _peek(batch.path):
            continue  # never evaluated (an adaptive sweep's discarded speculative batch): neither done nor bad
        if isinstance(manifest, ManifestError):
            reason = f"invalid batch result {batch.path}: its manifest does not load ({manifest})"
            found.bad[batch.path] = BadBatch(batch, reason, _peek(batch.path).get("policy_identity"))
            continue
        try:
            result = validate_batch_result(batch.path, campaign.expectation(batch, manifest))
        except (ResultValidationError, ValueError) as error:
            found.bad[batch.path] = BadBatch(batch, str(error), _peek(batch.path).get("policy_identity"))
        else:
            found.done[batch.path] = DoneBatch(batch, float(result["duration_s"]))


def survey(campaign: PolicyCampaign) -> Inventory:
    """Stat every planned file once; read only the batch files that exist and the manifests they point to, so a
    fresh campaign costs one stat per file."""
    found = Inventory()
    cache = Path(campaign.config.manifest_cache)
    for path, plan in campaign.manifests().items():
        if not Path(path).exists():
            found.manifests_missing.add(path)
            if (cache / plan.ref.benchmark / f"{plan.manifest_hash}.json").exists():
                found.manifests_cached.add(path)
    manifests: dict[str, Any] = {}
    for plan in campaign.tasks:
        _survey_task(campaign, plan, found, manifests)
    return found


def stale_results(campaign: PlannedTasks) -> list[str]:
    """Results under the run's folder that no policy of the config writes: a policy renamed or dropped from a
    sweep (results/<run>/<old name>/<benchmark>/batches), or the other layout of the same run name (one policy's
    results/<run>/<benchmark>/batches in a sweep, a sweep's policy folders in a one-policy run). Only named, never
    deleted: they may be the only copy of an evaluation."""
    root = campaign.root
    if not root.is_dir():
        return []
    benchmarks = set(registry.names())
    policies = {policy.name for policy in campaign.config.policies}
    multi = campaign.config.several_policies
    found = []
    for directory in sorted(path for path in root.iterdir() if path.is_dir()):
        if directory.name in benchmarks:
            if multi and (directory / "batches").is_dir():
                found.append(str(directory / "batches"))
            continue
        if multi and directory.name in policies:
            continue
        if any((directory / name / "batches").is_dir() for name in benchmarks):
            found.append(str(directory))
    return found


def stale_results_note(campaign: PlannedTasks) -> str | None:
    """The one line naming stale_results, or None when there are none."""
    found = stale_results(campaign)
    if not found:
        return None
    return (
        f"WARNING: not part of this campaign: {', '.join(found)} (results of a policy the config no longer names, "
        "or of the same run name with one policy vs several): delete it or rename it back"
    )
