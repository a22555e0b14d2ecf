import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError as SnakemakeWorkflowError
from snakemake.utils import min_version

from benchmarks import registry
from evalwf.rules import jobs
from evalwf.benchmark.adapter import get_adapter
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.environment import other_environment
from evalwf.common.errors import CauseOnly, ConfigError
from evalwf.plan.manifest import restore_cached_manifest
from evalwf.plan.rounds import (
    adaptive_benchmarks,
    batch_round,
    decision_path,
    early_round_targets,
    planned_batches,
    read_continuing,
    read_surely_continuing,
    round_batches,
    round_count,
    speculate_rounds,
    speculative_policies,
)
from evalwf.common.writable import check_writable
from evalwf.export.targets import check_trackers_installed, config_targets

min_version("9.0")


class WorkflowError(CauseOnly, SnakemakeWorkflowError):
    """The workflow's own errors (each names the key or file and the fix): printed by their message alone."""


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
        check_writable("manifest_cache", campaign.config.manifest_cache)
        # the submitter exports at the end (rules/export.smk); a job step never does
        if not workflow.remote_exec:
            check_trackers_installed(config_targets(campaign.config.document()))
        return campaign
    except ConfigError as error:
        raise WorkflowError(str(error)) from None


CAMPAIGN = _campaign_from_config(config)
RESULTS = CAMPAIGN.config.results_dir
# Where a batch's and a summary's files go: results/<run>/<benchmark>/..., or with several policies
# (`policies`) results/<run>/<policy>/<benchmark>/... (manifests stay shared at results/<run>/<benchmark>/).
OUT = f"{RESULTS}/{{run}}/{{policy}}" if CAMPAIGN.multi else f"{RESULTS}/{{run}}"
# The report's landing page (rule report_landing; workflow/report/workflow.rst finds it by this file name).
LANDING = f"{RESULTS}/{CAMPAIGN.run}/landing.html"
# The trackers the campaign ends by exporting to (`export:`; rules/export.smk)
EXPORT_TARGETS = config_targets(CAMPAIGN.config.document())


def export_record(target):
    """What the export to `target` wrote: the tracker runs, for a person looking for them (rules/export.smk)."""
    return f"{RESULTS}/{CAMPAIGN.run}/export/{target.name}.json"


wildcard_constraints:
    run=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    benchmark=registry.wildcard_pattern(),
    suite=r"[^/]+",
    scope=r"[^/]+",
    task=r"[^/.]+",
    digest=r"[0-9a-f]{16}",
    batch=r"\d\d\d\d+-\d+",
    round=r"\d+",
    policy=(
        "|".join(re.escape(name) for name in CAMPAIGN.members)
        if CAMPAIGN.multi
        else r"[^/]+"
    ),


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
            CAMPAIGN.config.manifest_cache,
        )


restore_cached_manifests()


def all_manifests(benchmark):
    """Content-addressed like a batch's manifest: only their presence matters to the summary, not their mtime."""
    return [ancient(path) for path in CAMPAIGN.manifests(benchmark)]


def all_batches(benchmark, campaign):
    """The batch files of `benchmark` that one policy's campaign (a PolicyCampaign) evaluates."""
    return [batch.path for batch in campaign.batches(benchmark)]


# The benchmarks of an adaptive sweep (`adaptive:`): evaluated in rounds, a checkpoint decision after each
# (workflow/rules/adaptive.smk); what a policy evaluates there is known only as the decisions are written.
ADAPTIVE = adaptive_benchmarks(CAMPAIGN)


def continuing_after(benchmark):
    """Reads round r's decision of `benchmark` once its checkpoint job has run; until then Snakemake plans what
    it can and plans the rest when the decision is written."""

    def read(round_index):
        decision = checkpoints.decide_round.get(
            run=CAMPAIGN.run, benchmark=benchmark, round=str(round_index)
        )
        return read_continuing(decision.output[0])

    return read


def policy_batches(benchmark, campaign):
    """A policy's batches: all of them, or in an adaptive sweep those of the rounds the decisions let it run."""
    if benchmark not in ADAPTIVE:
        return all_batches(benchmark, campaign)

    def batches(wildcards):
        planned = planned_batches(
            CAMPAIGN, benchmark, campaign.policy.name, continuing_after(benchmark)
        )
        return [batch.path for batch in planned]

    return batches


def decision_inputs(wildcards):
    """Round r's decision reads the batches of rounds 0..r of every policy (a dropped one: of the rounds it ran)
    and the decision before it: only finished rounds."""
    benchmark, round_index = wildcards.benchmark, int(wildcards.round)
    read = continuing_after(benchmark)
    paths = [decision_path(CAMPAIGN, benchmark, round_index - 1)] if round_index else []
    for name in CAMPAIGN.assignment[benchmark]:
        planned = planned_batches(CAMPAIGN, benchmark, name, read, round_index + 1)
        paths += [batch.path for batch in planned]
    return paths


def early_round_batches(wildcards):
    """Round q's batches of the policies that surely continue after decision q - 1 (no outcome of round q - 1 can
    drop them), listed once decision q - 2 is written (round 1: from the config alone), so that they run
    alongside round q - 1 instead of after its decision. They are the very batch files the policies' summaries
    ask for later: nothing runs twice, and no decision waits for them. With adaptive.speculate_rounds K >= 1:
    round q of every policy still racing after decision q - 1 - K (evalwf.plan.rounds.speculative_policies),
    which includes the former; a later decision may drop some of them, and their batches are then discarded
    (cancelled before they start: evalwf.rules.jobs)."""
    benchmark, round_index = wildcards.benchmark, int(wildcards.round)
    look_ahead = speculate_rounds(CAMPAIGN)
    if look_ahead:
        names = speculative_policies(
            round_index,
            look_ahead,
            list(CAMPAIGN.assignment[benchmark]),
            continuing_after(benchmark),
        )
    elif round_index == 1:
        from evalwf.report.adaptive import surely_continuing_from_start

        names = surely_continuing_from_start(CAMPAIGN, benchmark)
    else:
        decision = checkpoints.decide_round.get(
            run=CAMPAIGN.run, benchmark=benchmark, round=str(round_index - 2)
        )
        names = read_surely_continuing(decision.output[0])
    return [
        batch.path
        for name in names
        for batch in round_batches(CAMPAIGN.member(name), benchmark, round_index)
    ]


def speculated_rounds(benchmark):
    """With adaptive.speculate_rounds: the early-start targets of `benchmark`, written once every batch they asked
    for has ended (run or cancelled), so that the comparison counts what was discarded. Without it: none (the
    comparison's inputs stay as they were)."""
    if benchmark not in ADAPTIVE or not speculate_rounds(CAMPAIGN):
        return []
    return [
        path
        for path in early_round_targets(CAMPAIGN)
        if Path(path).parent == Path(decision_path(CAMPAIGN, benchmark, 0)).parent
    ]


def final_decision(benchmark):
    """The last round's decision holds every drop of the sweep (the last round itself needs none)."""
    return decision_path(CAMPAIGN, benchmark, round_count(CAMPAIGN, benchmark) - 2)


def campaign_of(wildcards):
    """The campaign of a job's policy: with several policies, the member its {policy} wildcard names."""
    return CAMPAIGN.member(wildcards.policy) if CAMPAIGN.multi else CAMPAIGN.single()


def caption_of(key):
    """A summary output's caption file (workflow/report/<name>.rst): one for every suite's own plot."""
    return "plot_suite" if key.startswith("plot_") else key


def policy_summaries(campaign):
    """Everything one policy's campaign ends in (several policies: a per-policy target, policy_<name>)."""
    return [
        path
        for benchmark in campaign.benchmarks
        for path in campaign.summary_paths(benchmark).values()
    ]


def all_summaries(wildcards):
    """What the campaign ends in. As an input function it runs while the DAG is built, when Snakemake knows
    whether this is a dry run (at parse time it does not): a dry run ends with the plan (evalwf plan),
    one per policy of several.
    """
    if workflow.dryrun:
        from evalwf.plan.table import print_plan_once

        print_plan_once(CAMPAIGN)
    comparisons = [
        path
        for benchmark in CAMPAIGN.compared_benchmarks()
        for path in CAMPAIGN.comparison_paths(benchmark).values()
    ]
    return (
        [f"{RESULTS}/{CAMPAIGN.run}/campaign.yaml", LANDING]
        + [
            path
            for campaign in CAMPAIGN.policy_campaigns()
            for path in policy_summaries(campaign)
        ]
        + comparisons
        + early_round_targets(CAMPAIGN)
        + [export_record(target) for target in EXPORT_TARGETS]
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


_COST_MODELS = {}


def expected_cost_resource(wildcards):
    """Expected seconds of simulation of this batch (the same figure `evalwf plan` shows for its policy): the
    executor turns it into the task's priority, so the longest batches start first and the campaign's tail
    shrinks. Measured durations of the policy's finished batches count once there are some; computed once per
    policy and submitter, never in job steps.
    """
    if workflow.remote_exec:
        return 0
    from evalwf.plan.cost import CostModel, expected_batch_cost

    campaign = campaign_of(wildcards)
    if campaign.policy.name not in _COST_MODELS:
        _COST_MODELS[campaign.policy.name] = CostModel.measure(campaign)
    batch = campaign.batch_plan_of(
        wildcards.benchmark, wildcards.suite, wildcards.task, wildcards.batch
    )
    return max(1, round(expected_batch_cost(_COST_MODELS[campaign.policy.name], batch)))


def manifest_gpu_resource(wildcards):
    """Building a manifest needs a GPU where the benchmark's expert check runs its simulator (RoboTwin)."""
    return get_adapter(wildcards.benchmark).manifest_gpus


def adaptive_round_resource(wildcards):
    """The round of an adaptive sweep the batch lies in (0 otherwise): the Labtasker executor claims earlier
    rounds first, so a decision's own round goes before the batches that run ahead of it.
    """
    if wildcards.benchmark not in ADAPTIVE:
        return 0
    batch = campaign_of(wildcards).batch_plan_of(
        wildcards.benchmark, wildcards.suite, wildcards.task, wildcards.batch
    )
    return batch_round(CAMPAIGN.config, batch)


def episodes_resource(wildcards):
    """How many episodes the batch evaluates: the executor's progress line counts them."""
    return CAMPAIGN.batch_plan_of(
        wildcards.benchmark, wildcards.suite, wildcards.task, wildcards.batch
    ).episodes.count


def note_planned_vs_took():
    """The line every campaign ends with: the plan recorded at submission against what its batches took."""
    from evalwf.plan.budget import campaign_cost_line

    print(f"cost: {campaign_cost_line(CAMPAIGN)}", file=sys.stderr, flush=True)


def note_stale_results():
    """At the end of a run (its last lines): results under the run's folder that no configured policy writes."""
    from evalwf.plan.inventory import stale_results_note

    note = stale_results_note(CAMPAIGN)
    if note:
        print(note, file=sys.stderr, flush=True)
