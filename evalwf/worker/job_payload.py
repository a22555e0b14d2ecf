"""What a task may ask a worker to run: the trust boundary between queue access and this machine (invariant 6).

A task's payload (evalwf.contract.task_payload.TaskPayload) only NAMES a Snakemake job of a workflow directory
(rule, wildcards, target-job entries, config files, attempt, outputs, logs, policy identity). Three steps, each its
own function: `TaskPayload.parse` (shape and types), `check_against_plan` (this worker's allowed directories and the
plan of the task's campaign) and `job_step_argv` (the command line); `validate_task` runs the three. The worker
builds the job step's command line itself, from the exact allow-list below (no option of the payload is passed
through), and checks everything else against the campaign that the task's config files define
(evalwf.plan.config.load_config, then the campaign's plan, evalwf/worker/job_plan.py) BEFORE any job step starts:
each target job must be a job of that plan (its `run` the config's run), the outputs exactly that job's outputs, the
policy identity that job's policy (whose command the worker takes from the config). A job step removes its target
jobs' outputs first, so a job outside the plan never reaches one. Snakefiles and config files come only from where
code lives: inside an allowed directory (and an allowed config directory, --allow-config), never from where jobs,
Snakemake or the queue write. So anyone who can reach the queue can ask for a job of an allowed campaign, and
nothing else.

Two kinds of refusal, each logged with its reason by the worker:
- NotForThisWorker: the workflow directory is not allowed (or not present) here. The task goes back to the queue
  uncharged, and the worker stops claiming that campaign's tasks (the campaign derived from the workflow
  directory, never the payload's word for it).
- TaskRefused: a malformed or hostile payload (unknown keys such as a command or a policy block, options, paths
  outside the allowed directories, a job or outputs not of its campaign's plan, a policy identity that the config
  does not give, a campaign key that is not its workflow directory's). The task is failed with the reason; every
  worker refuses it alike, so it never runs (a retry by its submitter is refused the same way).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from evalwf.contract.allowed_files import code_file_refusal, inside, written_by_tools
from evalwf.contract.policy_identity import serving_refusal
from evalwf.contract.task_payload import TargetJob, TaskPayload, TaskRefused
from evalwf.plan.campaign import Campaign
from evalwf.policy.spec import PolicySpec
from evalwf.worker.job_plan import PlannedJob, Wildcards, planned_jobs, written_directories

# Worker-side, fixed: what Snakemake 9's remote job step needs besides the job itself. The submitter's choices
# that matter (target jobs, allowed rules, attempt, latency wait, files to wait for, config files) come from the
# checked payload fields; nothing else does. No --force: a task whose outputs exist and validate is adopted, never
# evaluated again (JobStep.finished); forcing is the submitter's decision, which removes the outputs first.
FIXED_JOB_STEP_OPTIONS = (
    "--cores", "all",
    "--target-files-omit-workdir-adjustment",
    "--max-inventory-time", "0",
    "--retries", "0",
    "--nocolor",
    "--no-hooks",
    "--nolock",
    "--ignore-incomplete",
    "--rerun-triggers", "mtime", "software-env", "params", "code", "input",
    "--shared-fs-usage", "software-deployment-cache", "software-deployment", "source-cache", "persistence",
    "storage-local-copies", "input-output", "sources",
    "--scheduler", "greedy",
    "--default-resources", "tmpdir=system_tmpdir",
)  # fmt: skip


class NotForThisWorker(TaskRefused):
    """The task's workflow directory is not allowed (or not present) on this worker: handed back uncharged."""

    def __init__(self, message: str, campaign: str | None):
        super().__init__(message)
        self.campaign = campaign


@dataclass(frozen=True)
class JobStep:
    workdir: str
    argv: list[str]
    outputs: list[str]
    logs: list[str]
    policy: PolicySpec | None
    campaign: str
    jobs: tuple[PlannedJob, ...] = ()
    configfiles: tuple[str, ...] = ()  # the campaign's config files, resolved (what its node checks read)
    payload: TaskPayload | None = None  # the task it runs (None: a step made without a task)

    @property
    def target_jobs(self) -> tuple[str, ...]:
        return self.payload.target_jobs if self.payload is not None else ()

    def check_outputs(self) -> None:
        """Raise ValueError naming the file when an output of its jobs is missing or not valid."""
        for job in self.jobs:
            job.check()

    def finished(self) -> bool:
        """Every output exists and passes the layered validation: the job is done, whoever queued it again."""
        if not self.jobs or not all(os.path.exists(path) for path in self.outputs):
            return False
        try:
            self.check_outputs()
        except (OSError, ValueError):
            return False
        return True

    def replacing_outputs(self) -> JobStep:
        """The step that replaces outputs which exist but are not all valid: Snakemake would take an existing
        output as done (and exit 0 with it), so only here does the worker add --force."""
        if not any(os.path.lexists(path) for path in self.outputs):
            return self
        return replace(self, argv=[*self.argv[:-2], "--force", *self.argv[-2:]])


# -- where code comes from (the rule the submitter applies too: evalwf.contract.allowed_files) ----------------------


@lru_cache(maxsize=1)
def _default_written() -> tuple[str, str]:
    """Where a campaign's jobs write when its config does not say (results_dir, manifest_cache: the schema's
    defaults, the only source)."""
    from evalwf.plan.config import config_schema

    properties = config_schema()["properties"]
    return properties["results_dir"]["default"], properties["manifest_cache"]["default"]


def _code_file(path: str, what: str, workdir: str, allowed: list[str], campaign_writes: Sequence[str] = ()) -> str:
    """A Snakefile or config file: a file inside an allowed directory, and in no place that jobs, Snakemake or the
    queue write (the schema's default places, and `campaign_writes`: those of the campaign's config)."""
    written = [*written_by_tools(workdir), *written_directories(*_default_written(), workdir), *campaign_writes]
    refusal = code_file_refusal(path, what, allowed, written)
    if refusal is not None:
        raise TaskRefused(refusal)
    return os.path.realpath(path)


# -- the campaign that the config files define -----------------------------------------------------------------------


@dataclass(frozen=True)
class CampaignPlan:
    written: tuple[str, ...]  # where its jobs write (absolute): never a place for code
    run: str
    jobs: dict[tuple[str, Wildcards], PlannedJob]


@lru_cache(maxsize=32)
def _campaign_plan(paths: tuple[str, ...], workdir: str, _stamps: tuple[tuple[int, int], ...]) -> CampaignPlan:
    from evalwf.common.errors import ConfigError
    from evalwf.plan.config import load_config

    try:
        config = load_config(*paths)
        campaign = Campaign(config)
    except (ConfigError, KeyError, TypeError, ValueError) as error:
        raise TaskRefused(f"the campaign's config files {list(paths)} are not a valid config: {error}") from None
    written = written_directories(config.results_dir, config.manifest_cache, workdir)
    return CampaignPlan(tuple(written), campaign.run, planned_jobs(campaign, workdir))


def campaign_plan(configfiles: list[str], workdir: str) -> CampaignPlan:
    """The validated campaign of the config files and the jobs it plans (cached while the files are unchanged)."""
    stamps = []
    for path in configfiles:
        try:
            info = os.stat(path)
        except OSError as error:
            raise TaskRefused(f"config file {path} cannot be read here: {error.strerror}") from None
        stamps.append((info.st_mtime_ns, info.st_size))
    return _campaign_plan(tuple(configfiles), workdir, tuple(stamps))


def _planned(plan: CampaignPlan, job: TargetJob, configfiles: list[str]) -> PlannedJob:
    """The job of the plan that a target job names; refused with what differs when there is none."""
    planned = plan.jobs.get((job.rule, frozenset(job.wildcards)))
    if planned is not None:
        return planned
    wildcards = dict(job.wildcards)
    named = ",".join(f"{k}={v}" for k, v in job.wildcards)
    if wildcards.get("run") != plan.run:
        raise TaskRefused(
            f"target job {job.rule}:{named[:200]} names run {wildcards.get('run')!r}, but its config files "
            f"{configfiles} define run {plan.run!r}: a task only names jobs of its own campaign"
        )
    raise TaskRefused(
        f"target job {job.rule}:{named[:200]} is not a job of the campaign that its config files {configfiles} plan"
    )


@dataclass(frozen=True)
class CheckedTask:
    """A payload this worker may run: its paths resolved here, its jobs those of its campaign's plan."""

    payload: TaskPayload
    workdir: str  # resolved
    snakefile: str  # resolved
    configfiles: tuple[str, ...]  # resolved
    wait_for_files: tuple[str, ...]  # absolute, inside workdir
    jobs: tuple[PlannedJob, ...]
    outputs: tuple[str, ...]  # the jobs' outputs, sorted
    policy: PolicySpec | None  # from the config files, never from the payload


def check_against_plan(
    payload: TaskPayload, allowed: list[str], allowed_configs: list[str] | None = None
) -> CheckedTask:
    """Whether this worker may run the payload's job: its workflow directory allowed here (else NotForThisWorker),
    its Snakefile and config files where code lives, each target job, its outputs and its policy identity those of
    the plan that its config files define (else TaskRefused naming what differs)."""
    # whose task is it? derived from its workflow directory; not ours: handed back uncharged
    workdir, campaign = payload.workdir, payload.campaign
    if not inside(workdir, allowed):
        raise NotForThisWorker(
            f"workflow directory {workdir} is not allowed on this worker (allowed: {', '.join(allowed)})", campaign
        )
    if not os.path.isdir(workdir):
        raise NotForThisWorker(f"workflow directory {workdir} does not exist here (no shared filesystem?)", campaign)
    workdir = os.path.realpath(workdir)

    # where its code comes from: before anything is read from there
    snakefile = _code_file(payload.snakefile, "Snakefile", workdir, allowed)
    configfiles = []
    for path in payload.configfiles:
        absolute = os.path.normpath(os.path.join(workdir, path))
        if allowed_configs is not None and not inside(absolute, allowed_configs):
            raise TaskRefused(
                f"config file {path} is not inside a config directory this worker allows (--allow-config "
                f"{' '.join(allowed_configs)})"
            )
        configfiles.append(_code_file(absolute, "config file", workdir, allowed))
    if not configfiles:
        raise TaskRefused(
            "the task names no config file: a worker checks its job against the campaign that its config files "
            "define, and takes the policy from there (submit with --configfile)"
        )
    plan = campaign_plan(configfiles, workdir)
    for path in [snakefile, *configfiles]:  # nor from where THIS campaign's jobs write
        _code_file(path, "Snakefile" if path == snakefile else "config file", workdir, allowed, plan.written)

    # which jobs: each one of the plan, checked before Snakemake (which removes a job's outputs first) starts
    jobs = [_planned(plan, job, configfiles) for job in payload.named_jobs()]
    outputs = list(payload.outputs)
    expected = sorted({path for job in jobs for path in job.outputs})
    if sorted(set(map(os.path.normpath, outputs))) != expected or len(outputs) != len(expected):
        raise TaskRefused(
            f"the task's outputs {outputs[:5]} are not the outputs of its job(s) {expected[:5]} (success is verified "
            "on those)"
        )
    wait_for_files = []
    for path in payload.wait_for_files:
        absolute = os.path.normpath(os.path.join(workdir, path))
        if not (absolute == workdir or absolute.startswith(workdir + "/")):
            raise TaskRefused(f"--wait-for-files {path} is not inside the workflow directory {workdir}")
        wait_for_files.append(absolute)

    # which policy: the one its jobs evaluate (served by this worker: a job step given none would start its own)
    policies = {job.policy.identity: job.policy for job in jobs if job.policy is not None}
    if len(policies) > 1:
        raise TaskRefused(f"the task's jobs evaluate several policies ({sorted(policies)}): one task, one policy")
    policy = next(iter(policies.values()), None)
    refusal = serving_refusal(
        policy.identity if policy else None,  # what this worker serves the jobs with: the config's policy
        payload.policy_identity,
        lambda served, needed: (
            f"the task's policy identity {needed} is not the policy of its config files {configfiles} for its "
            f"job(s) ({served or 'none: its job evaluates no policy'})"
        ),
    )
    if refusal is not None:
        raise TaskRefused(refusal)
    return CheckedTask(
        payload, workdir, snakefile, tuple(configfiles), tuple(wait_for_files), tuple(jobs), tuple(expected), policy
    )


def job_step_argv(task: CheckedTask) -> list[str]:
    """The job step's command line: the checked fields and this worker's fixed options, nothing else."""
    payload = task.payload
    argv = [sys.executable, "-m", "snakemake", "--snakefile", task.snakefile]
    argv += ["--target-jobs", *payload.target_jobs, "--allowed-rules", *dict.fromkeys(payload.rules)]
    argv += ["--local-groupid", payload.local_groupid] if payload.local_groupid is not None else ["--force-use-threads"]
    argv += ["--attempt", str(payload.attempt), *FIXED_JOB_STEP_OPTIONS, "--latency-wait", str(payload.latency_wait)]
    if task.wait_for_files:
        argv += ["--wait-for-files", *task.wait_for_files]
    argv += ["--configfiles", *task.configfiles]
    argv += ["--mode", "remote"]
    return argv


def validate_task(args: object, allowed: list[str], allowed_configs: list[str] | None = None) -> JobStep:
    """A task's args parsed, checked against this worker's allowed directories and its campaign's plan, and the job
    step it names built."""
    task = check_against_plan(TaskPayload.parse(args), allowed, allowed_configs)
    return JobStep(
        task.workdir,
        job_step_argv(task),
        list(task.outputs),
        list(task.payload.logs),
        task.policy,
        task.payload.campaign,
        task.jobs,
        task.configfiles,
        task.payload,
    )
