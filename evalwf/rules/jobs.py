"""The bodies of the workflow's job steps: seal a manifest, evaluate one batch.

The simulator side of both runs in the benchmark's own interpreter when its section names one
(`benchmarks.<name>.python`, evalwf.job.interpreter): the job body resolves the plan and the policy
endpoint here, then hands the step to `python -m evalwf.job.sim_step` there. Without it, in process.

The policy endpoint of a batch: an external server (`policy.url`), checked with an openpi handshake before the
batch; else the endpoint its worker gives it (evalwf.contract.job_step_context); without one (local profile) a
guarded policy server of its own for the duration of the batch.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Protocol, TextIO

import yaml

from evalwf.common.atomic import atomic_write_text
from evalwf.common.errors import (
    ConfigError,
    EnvironmentUnavailable,
    JobFailed,
    ManifestError,
    ResultValidationError,
    SimulatorEnvError,
)
from evalwf.contract.failure import write_cause
from evalwf.contract.job_step_context import JobStepContext
from evalwf.contract.sim_request import BatchRequest, ExternalServer, ManifestRequest, SimRequest
from evalwf.job import sim_step
from evalwf.job.interpreter import run_in_interpreter
from evalwf.plan.campaign import BatchPlan, Campaign, PlannedTasks, PolicyCampaign
from evalwf.plan.campaign_config import CampaignConfig
from evalwf.plan.interpreter import resolve_interpreter
from evalwf.plan.results import write_cancelled_speculative
from evalwf.plan.rounds import (
    adaptive_benchmarks,
    cancelled_speculation,
    is_cancelled_marker,
    speculation_watch,
    written_batches,
)
from evalwf.policy.client import PolicyServerError, check_endpoint
from evalwf.policy.spec import EXTERNAL_ENDPOINT, metadata_digest

# The errors the project raises itself, each naming what is wrong and the fix: reported by their message alone.
PROJECT_ERRORS = (ConfigError, EnvironmentUnavailable, ManifestError, ResultValidationError, SimulatorEnvError,
                  PolicyServerError)  # fmt: skip


class NamedOutputs(Protocol):
    """A rule's named output list (Snakemake's OutputFiles): key -> path."""

    def items(self) -> Iterable[tuple[str, str]]: ...


def log(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class _Tee:
    def __init__(self, *streams: TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


_REDIRECT_LOCK = threading.RLock()


@contextlib.contextmanager
def logged_to(path: str) -> Iterator[None]:
    """Copy this job's stderr into its Snakemake log file (a run: block has no shell redirection); in a worker's
    job step, record the exception it fails with for the worker (evalwf.contract.failure).

    sys.stderr is process-wide: local rules that Snakemake runs in threads of one process (the gather steps of
    several policies or benchmarks) take turns here, or one's exit would leave sys.stderr on another's closed
    log file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with (
        _REDIRECT_LOCK,
        open(path, "a", encoding="utf-8") as handle,
        contextlib.redirect_stderr(_Tee(sys.stderr, handle)),
    ):
        try:
            yield
        except BaseException as error:
            log(f"FAILED: {type(error).__name__}: {error}")
            # the log keeps where it came from; after the FAILED line, whose preceding traceback (the simulator's,
            # say) is the one the policy breaker reads the cause from
            handle.write(traceback.format_exc())
            context = JobStepContext.from_environ()
            if context is not None and context.cause_file:  # a worker's job step: it reports this as the task's error
                write_cause(context.cause_file, error)
            raise


def run_logged(log_path: str, function: Callable[..., object], *args: object) -> None:
    """Run a job body with its stderr copied into the job's log file. An error of the project's own fails the job
    with its message alone (JobFailed): Snakemake would print the frames of its job body after it."""
    try:
        with logged_to(log_path):
            function(*args)
    except PROJECT_ERRORS as error:
        raise JobFailed(f"{type(error).__name__}: {error}") from None


def _run_sim_step(campaign: PlannedTasks, benchmark: str, request: SimRequest, what: str) -> None:
    """In the benchmark's interpreter when its section names one, else in process."""
    python = resolve_interpreter(campaign.settings(benchmark).python, benchmark)
    if python is None:
        sim_step.run_request(request)
        return
    run_in_interpreter(python, request, log, what)
    if not Path(request.output).exists():
        raise SimulatorEnvError(f"{what}: {python} exited 0 but did not write {request.output}")


def seal_task_manifest(campaign: PlannedTasks, benchmark: str, scope: str, task: str, digest: str, output: str) -> None:
    """Seal the manifest its rule's wildcards name (TaskPlan.manifest_key); `output` must be its planned path."""
    plan = campaign.manifest_plan_of(benchmark, scope, task, digest)
    if plan is None or os.path.normpath(plan.manifest_path) != os.path.normpath(output):
        raise ConfigError(f"manifest {output} is not planned by this config (the config changed?)")
    request = ManifestRequest(
        benchmark=plan.ref.benchmark,
        definition=plan.definition,
        scope=plan.scope,
        task=plan.ref.task,
        section=campaign.section(plan.ref.benchmark),
        output=output,
        cache_dir=campaign.config.manifest_cache,
    )
    _run_sim_step(campaign, plan.ref.benchmark, request, f"manifest {output}")


def external_server(campaign: PolicyCampaign) -> ExternalServer:
    """The openpi handshake with an external server (policy.url) before a batch: what it says it serves."""
    url = campaign.policy.url
    assert url is not None
    log(f"policy {campaign.policy.name}: checking the external server {url} (openpi handshake)")
    metadata = check_endpoint(url, timeout_s=campaign.policy.startup_timeout_s, what="policy.url")
    digest = metadata_digest(metadata)
    log(f"policy server {url} answered: metadata {digest} {sorted(map(str, metadata))}")
    return ExternalServer(url=url, metadata_digest=digest)


@contextlib.contextmanager
def policy_endpoint(campaign: PolicyCampaign, log_dir: Path) -> Iterator[tuple[str, ExternalServer | None, str | None]]:
    """(endpoint, external server record, server process): policy.url (health-checked), else the worker's endpoint
    if it gave one (checked to serve this policy), else a server of our own. The server process (`pid:start time`,
    evalwf.policy.peer) is the one the batch's client must find answering; None for policy.url, which is outside
    this check (docs/trust.md)."""
    context = JobStepContext.from_environ() or JobStepContext()
    refusal = context.serving(campaign.policy.identity)
    if refusal is not None:
        raise PolicyServerError(refusal)
    if campaign.policy.external:
        server = external_server(campaign)
        yield server.url, server, None
        return
    if context.endpoint and context.endpoint != EXTERNAL_ENDPOINT:
        yield context.endpoint, None, context.server_process
        return
    from evalwf.worker.policy_server import GuardedPolicyServer

    log(f"no endpoint from a worker: starting policy server {campaign.policy.name} for this batch")
    with GuardedPolicyServer(gpu=os.environ.get("CUDA_VISIBLE_DEVICES", ""), log_dir=log_dir) as server:
        endpoint = server.ensure(campaign.policy)
        yield endpoint, None, server.process_identity


def record_campaign(config: CampaignConfig, output: str) -> None:
    """Snapshot of the validated config, with the policy identity (several policies: each one's, and which
    policies evaluate which benchmark), for the status command and the report."""
    identities = {policy.name: policy.identity for policy in config.policies}
    document = config.document()
    if config.several_policies:
        snapshot = {**document, "policy_identity": identities[config.baseline], "policy_identities": identities}
        snapshot["benchmark_policies"] = config.benchmark_policies()
    else:
        snapshot = {**document, "policy_identity": next(iter(identities.values()))}
    atomic_write_text(output, yaml.safe_dump(snapshot, sort_keys=False))


def record_submission(campaign: Campaign, config_output: str, planned_output: str) -> None:
    """The config snapshot (record_campaign) and what the plan says the campaign costs as it is submitted
    (evalwf.plan.budget): every campaign ends on that figure against what its batches took."""
    from evalwf.plan.budget import record_planned_cost

    record_campaign(campaign.config, config_output)
    planned = record_planned_cost(campaign, planned_output)
    log(f"planned {planned.gpu_hours:.3g} GPU-h of simulation for {planned.batches} batches ({planned_output})")


def summarize(campaign: Campaign, policy: str, benchmark: str, outputs: NamedOutputs) -> None:
    """Gather step of `policy` on `benchmark` (its rule's params); `outputs` is the rule's named output list (keys
    as PolicyCampaign.summary_paths)."""
    from evalwf.report.aggregate import summarize_benchmark

    named = dict(outputs.items())
    member = campaign.members.get(policy)
    if (
        member is None
        or benchmark not in member.benchmarks
        or member.summary_paths(benchmark)["tasks"] != named["tasks"]
    ):
        raise ConfigError(f"{named['tasks']} is not a summary this config plans")
    planned = None  # an adaptive sweep: what the decisions so far let this policy evaluate
    if benchmark in adaptive_benchmarks(campaign):
        planned = written_batches(campaign, benchmark, member.policy.name)
    summarize_benchmark(member, benchmark, named, planned=planned)  # prints the suite, reference and task tables
    log(f"{benchmark}: tables in {named['markdown']} and {named['latex']}, plot {named['plot']}")


def compare_policies(campaign: Campaign, benchmark: str, outputs: NamedOutputs) -> None:
    """Gather step across the policies of `benchmark` (its rule's param): success per policy and the difference to
    the baseline."""
    from evalwf.report.policy_comparison import write_policy_comparison

    named = dict(outputs.items())
    if (
        benchmark not in campaign.compared_benchmarks()
        or campaign.comparison_paths(benchmark)["suites"] != named["suites"]
    ):
        raise ConfigError(f"{named['suites']} is not a comparison this config plans")
    write_policy_comparison(campaign, benchmark, named)
    log(f"{benchmark}: policy comparison in {named['markdown']} and {named['suites']}, plot {named['plot']}")


def export_results(campaign: Campaign, tracker: str, output: str) -> None:
    """The campaign's end: its results into the tracker `export.<tracker>` names (evalwf.export), and a record of
    the tracker runs written."""
    from evalwf.export.run_record import ExportError
    from evalwf.export.targets import config_targets
    from evalwf.export.to_trackers import export_run, write_export_record

    targets = [target for target in config_targets(campaign.config.document()) if target.name == tracker]
    try:
        exported = export_run(campaign.root, targets)
    except ExportError as error:
        raise JobFailed(f"export to {tracker}: {error}") from None
    for record in exported:
        log(record.line())
    write_export_record(output, exported)


def write_landing(campaign: Campaign, output: str) -> None:
    """The report's landing page: the campaign's headline tables and plots (comparisons first)."""
    from evalwf.report.landing import write_landing as write

    write(campaign, output)
    log(f"landing page of the report: {output}")


def decide_round(campaign: Campaign, benchmark: str, round_index: int, output: str) -> None:
    """After a round of an adaptive sweep: which policies continue (evalwf.report.adaptive)."""
    from evalwf.report.adaptive import decide_round as decide

    decision = decide(campaign, benchmark, round_index, output)
    stopped = [name for name in decision["racing"] if name not in decision["continuing"]]
    log(
        f"{benchmark} round {round_index} ({decision['episodes_per_task']} episodes per task): "
        f"continuing {', '.join(decision['continuing'])}; dropped now: {', '.join(stopped) or 'none'}"
    )


def note_early_round(output: str, batches: list[str]) -> None:
    """The early start of a round of an adaptive sweep: which batches it asked for (one path per line; a
    speculative one cancelled because its policy was dropped first says so after a tab)."""
    cancelled = [path for path in batches if is_cancelled_marker(path)]
    atomic_write_text(
        output,
        "".join(
            f"{path}\tdiscarded (speculative): cancelled\n" if path in cancelled else f"{path}\n" for path in batches
        ),
    )
    log(
        f"{output}: {len(batches)} batches started before the previous round's decision"
        + (f", {len(cancelled)} of them discarded (speculative): cancelled before they ran" if cancelled else "")
    )


def evaluate_batch(campaign: PolicyCampaign, benchmark: str, suite: str, task: str, label: str, output: str) -> None:
    """Evaluate the planned batch its rule's wildcards name (BatchPlan.key), whose result file is `output`, in the
    benchmark's interpreter. In an adaptive sweep, a speculative batch whose policy a written decision dropped is
    not started (it ends at once with a marker in place of its result), and one running stops between episodes
    once a decision drops it (evalwf.plan.rounds)."""
    try:
        batch: BatchPlan | None = campaign.batch_plan_of(benchmark, suite, task, label)
    except KeyError:
        batch = None
    if batch is None or os.path.normpath(batch.path) != os.path.normpath(output):
        raise ConfigError(f"batch {output} is not planned by this config (the config changed?)")
    cancelled = cancelled_speculation(campaign, campaign.policy.name, benchmark, batch)
    if cancelled:
        write_cancelled_speculative(output, cancelled)
        log(f"{output}: cancelled before it started: {cancelled}")
        return
    plan = campaign.task_plan(benchmark, suite, task)
    resolve_interpreter(campaign.settings(benchmark).python, benchmark)  # missing: fail before any server
    artifacts = campaign.benchmark_dir(benchmark) / "artifacts"
    with policy_endpoint(campaign, artifacts / "logs") as (endpoint, server, server_process):
        request = BatchRequest(
            run=campaign.run,
            benchmark=benchmark,
            suite=suite,
            task=task,
            episode_start=batch.episodes.start,
            episode_count=batch.episodes.count,
            section=campaign.section(benchmark),
            manifest_path=plan.manifest_path,
            manifest_hash=plan.manifest_hash,
            endpoint=endpoint,
            server_process=server_process,
            infer_timeout_s=campaign.policy.infer_timeout_s,
            policy_identity=campaign.policy.identity,
            policy_server=server,
            output=output,
            artifacts_dir=str(artifacts),
            video_dir=str(Path(output).parent / "videos"),
            stop_if_dropped=speculation_watch(campaign, campaign.policy.name, benchmark, batch),
        )
        _run_sim_step(campaign, benchmark, request, f"{benchmark} {suite}/{task} batch {batch.episodes.label}")
