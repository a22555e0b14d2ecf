import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from benchmarks import registry
from evalwf.rules import jobs
from evalwf.benchmark.adapter import get_adapter
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.environment import other_environment
from evalwf.common.errors import ConfigError
from evalwf.plan.manifest import restore_cached_manifest
from evalwf.common.writable import check_writable

min_version("9.0")


def _shown_path(path):
    """A config file as the user named it: relative to the working directory when inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _campaign_from_config(raw):
    """Validate the config before any job runs; without --configfile, use the embedded demo. The config files are
    merged by our loader, not Snakemake's (a later file would silently win over an earlier one): files that
    disagree are refused, as the workers' check of a task's config files does (the same load_config); --config
    overrides apply on top. The output directories must be writable (checked for real, also as root).
    """
    files = [_shown_path(str(path)) for path in workflow.overwrite_configfiles]
    try:
        if files:
            overrides = dict(workflow.config_settings.config)
            campaign = Campaign(load_config(*files, overrides=overrides))
        elif not raw:
            campaign = Campaign(
                load_config(Path(workflow.basedir).parent / "config" / "demo.yaml")
            )
        else:
            campaign = Campaign(validate_config(raw))
        check_writable("results_dir", campaign.root)
        check_writable("manifest_cache", campaign.config["manifest_cache"])
        return campaign
    except ConfigError as error:
        raise WorkflowError(str(error)) from None


CAMPAIGN = _campaign_from_config(config)
RESULTS = CAMPAIGN.config["results_dir"]
# Where a batch's and a summary's files go: results/<run>/<benchmark>/..., or with several policies
# (`policies`) results/<run>/<policy>/<benchmark>/... (manifests stay shared at results/<run>/<benchmark>/).
OUT = f"{RESULTS}/{{run}}/{{policy}}" if CAMPAIGN.multi else f"{RESULTS}/{{run}}"


wildcard_constraints:
    run=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    benchmark=registry.wildcard_pattern(),
    suite=r"[^/]+",
    scope=r"[^/]+",
    task=r"[^/.]+",
    digest=r"[0-9a-f]{16}",
    batch=r"\d\d\d\d+-\d+",
    policy="|".join(re.escape(name) for name in CAMPAIGN.members) or r"[^/]+",


def manifest_of(wildcards):
    """The sealed manifest a batch reads. Its path is content-addressed (the hash of what defines the episodes),
    so its mtime means nothing: a manifest rebuilt byte for byte must not rerun finished batches.
    """
    plan = CAMPAIGN.task_plan(wildcards.benchmark, wildcards.suite, wildcards.task)
    check_environment_here(plan)
    return ancient(plan.manifest_path)


_NOTED_UNAVAILABLE = set()


def check_environment_here(plan):
    """The environment a manifest's name records (evalwf.plan.environment) must be readable here, or nothing
    may run (a host with it would plan other names; a dry run still plans, and says so); and a job step whose
    manifest is missing under this host's name but present under another names what differs.
    """
    benchmark = plan.ref.benchmark
    unavailable = CAMPAIGN.environment_unavailable(benchmark)
    if unavailable and not workflow.dryrun:
        raise WorkflowError(
            f"benchmark {benchmark} cannot run from this host: {unavailable}. Its manifests are named after its "
            "interpreter's package versions and its checkout, so the host that submits the campaign needs them "
            "as well as the workers (a dry run works without them)"
        )
    if unavailable and benchmark not in _NOTED_UNAVAILABLE:
        _NOTED_UNAVAILABLE.add(benchmark)
        print(
            f"NOTE: {benchmark} planned without its environment ({unavailable}): its manifest names here stand "
            "for nothing, and a real run refuses to start",
            file=sys.stderr,
        )
    if workflow.remote_exec and not Path(plan.manifest_path).exists():
        other = other_environment(plan.manifest_path, plan.definition)
        if other:
            raise WorkflowError(
                f"{benchmark} on this host is not the environment the campaign was planned with: {other}. "
                f"Every host that runs its jobs needs that environment (benchmarks.{benchmark}.python)"
            )


def restore_cached_manifests():
    """Missing manifests come back from the content-addressed cache before the DAG is built: a manifest job in
    the DAG would rerun every finished batch of its task (Snakemake reruns what depends on a job it runs).
    """
    for path, plan in CAMPAIGN.manifests().items():
        restore_cached_manifest(
            plan.ref.benchmark,
            plan.manifest_hash,
            path,
            CAMPAIGN.config["manifest_cache"],
        )


restore_cached_manifests()


def all_manifests(benchmark):
    """Content-addressed like a batch's manifest: only their presence matters to the summary, not their mtime."""
    return [ancient(path) for path in CAMPAIGN.manifests(benchmark)]


def all_batches(benchmark, campaign=CAMPAIGN):
    return [batch.path for batch in campaign.batches(benchmark)]


def campaign_of(wildcards):
    """The campaign of a job's policy: with several policies, the member its {policy} wildcard names."""
    return CAMPAIGN.member(wildcards.policy) if CAMPAIGN.multi else CAMPAIGN


def policy_summaries(campaign):
    """Everything one policy's campaign ends in (several policies: a per-policy target, policy_<name>)."""
    return [
        path
        for benchmark in campaign.benchmarks
        for path in campaign.summary_paths(benchmark).values()
    ]


def all_summaries(wildcards):
    """What the campaign ends in. As an input function it runs while the DAG is built, when Snakemake knows
    whether this is a dry run (at parse time it does not): a dry run first prints the plan (evalwf plan),
    one per policy of several.
    """
    if workflow.dryrun:
        from evalwf.plan.table import print_plan_once

        for campaign in CAMPAIGN.policy_campaigns():
            print_plan_once(campaign)
    comparisons = [
        path
        for benchmark in CAMPAIGN.compared_benchmarks()
        for path in CAMPAIGN.comparison_paths(benchmark).values()
    ]
    return (
        [f"{RESULTS}/{CAMPAIGN.run}/campaign.yaml"]
        + [
            path
            for campaign in CAMPAIGN.policy_campaigns()
            for path in policy_summaries(campaign)
        ]
        + comparisons
    )


def policy_param(wildcards):
    """What defines the policy's answers (a change reruns every batch); the executor sends it to the workers."""
    return campaign_of(wildcards).policy.identity_block()


def policy_identity_param(wildcards):
    """The tag every result of the batch's policy carries (the executor routes the task by it)."""
    return campaign_of(wildcards).policy.identity


def manifest_digest_param(wildcards):
    """What defines the batch's episodes (a change reruns the task's batches), carried as a param so that a
    rebuilt byte-identical manifest (same digest) invalidates nothing."""
    return CAMPAIGN.task_plan(
        wildcards.benchmark, wildcards.suite, wildcards.task
    ).manifest_hash


def settings_param(wildcards):
    """What in the benchmark's section shapes episode outcomes (a change reruns its batches)."""
    return CAMPAIGN.settings_digest(wildcards.benchmark)


_COST_MODEL = []


def expected_cost_resource(wildcards):
    """Expected seconds of simulation of this batch (the same figure `evalwf plan` shows): the executor turns it
    into the task's priority, so the longest batches start first and the campaign's tail shrinks. Measured
    durations of finished batches count once there are some; computed once per submitter, never in job steps.
    """
    if workflow.remote_exec:
        return 0
    if not _COST_MODEL:
        from evalwf.plan.cost import CostModel

        _COST_MODEL.append(CostModel.measure(CAMPAIGN))
    from evalwf.plan.cost import expected_batch_cost

    batch = CAMPAIGN.batch_plan_of(
        wildcards.benchmark, wildcards.suite, wildcards.task, wildcards.batch
    )
    return max(1, round(expected_batch_cost(_COST_MODEL[0], batch)))


def manifest_gpu_resource(wildcards):
    """Building a manifest needs a GPU where the benchmark's expert check runs its simulator (RoboTwin)."""
    return get_adapter(wildcards.benchmark).manifest_gpus


def episodes_resource(wildcards):
    """How many episodes the batch evaluates: the executor's progress line counts them."""
    return CAMPAIGN.batch_plan_of(
        wildcards.benchmark, wildcards.suite, wildcards.task, wildcards.batch
    ).episodes.count

