"""What a Labtasker task carries for one Snakemake job, and the deterministic task id derived from it.

The id depends only on what defines the job (workflow directory, Snakefile, rule(s), wildcards, declared
outputs, policy identity), never on the attempt, the time or the submitting process, so a resubmitted or
restarted campaign addresses the same task.

The args (a TaskPayload, evalwf/contract/task_payload.py, sent as its to_task_args()) NAME the job and carry no
command line (invariant 6: queue access is not shell access): rule(s),
wildcards and Snakemake's target-job entries, the config files (relative to the workflow directory), the
attempt, the latency wait and the files the job step waits for (the submitting Snakemake's temp directory: they
change between Snakemake invocations; submission.py reconciles that with the existing task), outputs, logs and
the policy identity. The worker builds the job step's command line from its own allow-list and takes the policy
command from the campaign's config files (evalwf/worker/job_payload.py). Snakemake's --config overrides
cannot travel this way: such a submission is refused with a message saying to use a config file.

The payload never holds a secret: the token is read from its file or the environment by the client only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from typing import Any, TypedDict

from evalwf.contract import campaign_key
from evalwf.contract.task_payload import TaskArgs, TaskPayload

# Options of Snakemake's job step command that change what the job computes and cannot be carried as files.
UNCARRIED_OPTIONS = ("--config", "-C", "--set-resources", "--set-threads", "--set-scatter", "--set-resource-scopes")

MAX_NAME_CHARS = 200


def short_id(key: str) -> str:
    """Labtasker task ids match t_[A-Za-z0-9_-]{12}."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return "t_" + base64.urlsafe_b64encode(digest).decode("ascii")[:12]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def _param(job: Any, name: str) -> Any:
    params = getattr(job, "params", None)
    value = getattr(params, name, None) if params is not None else None
    if value is None and isinstance(params, dict):
        value = params.get(name)
    return value


def _policy_identity(job: Any) -> str | None:
    """The identity of the rule's `policy` param (what defines the policy's answers; the worker takes the policy
    itself, its operational settings included, from the campaign's config files): the workflow names it (the
    `policy_identity` param, the tag every result carries); a workflow that does not is given a hash of its policy
    block. None: the job evaluates no policy."""
    policy = _param(job, "policy")
    if not isinstance(policy, dict):
        return None
    named = _param(job, "policy_identity")
    if isinstance(named, str) and named:
        return named
    return "policy@" + hashlib.sha256(_canonical(policy).encode()).hexdigest()[:16]


def _single_jobs(job: Any) -> list[Any]:
    return list(job.jobs) if job.is_group() else [job]


def _int_resource(resources: Any, name: str) -> int:
    try:
        value = resources.get(name, 0) if hasattr(resources, "get") else getattr(resources, name, 0)
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class TaskMetadata(TypedDict):
    """What status rounds select a campaign's tasks by (Labtasker task metadata)."""

    campaign: str
    workflow: str
    rule: str  # the job's rule, or "group"


class JobStepFields(TypedDict):
    """What a worker needs to rebuild Snakemake's job step, read from Snakemake's own job step command."""

    configfiles: list[str]
    target_jobs: list[str]
    local_groupid: str | None
    attempt: int
    latency_wait: int
    wait_for_files: list[str]


@dataclass(frozen=True)
class TaskSpec:
    task_id: str
    name: str
    payload: TaskPayload
    metadata: TaskMetadata

    @property
    def args(self) -> TaskArgs:
        """What the Labtasker task's args hold."""
        return self.payload.to_task_args()

    @property
    def outputs(self) -> list[str]:  # absolute
        return list(self.payload.outputs)

    @property
    def logs(self) -> list[str]:  # absolute
        return list(self.payload.logs)

    def outputs_exist(self) -> bool:
        return all(os.path.exists(path) for path in self.outputs)


def _option_values(tokens: list[str]) -> dict[str, list[str]]:
    """`--name v1 v2 --flag --other v` -> {"--name": [v1, v2], "--flag": [], "--other": [v]} (last one wins)."""
    values: dict[str, list[str]] = {}
    current: list[str] | None = None
    for token in tokens:
        if token.startswith("-") and not token.lstrip("-").isdigit() and len(token) > 1:
            name, _, inline = token.partition("=")
            current = values[name] = [inline] if inline else []
        elif current is not None:
            current.append(token)
    return values


def uncarried_refusal(options: dict[str, list[str]] | str) -> str | None:
    """Why a job step with these options (parsed, or Snakemake's general job arguments as one string) cannot be
    queued: the options a task cannot carry (--config, --set-resources, ...), with the fix; None when it can."""
    if isinstance(options, str):
        try:
            options = _option_values(shlex.split(options))
        except ValueError:
            options = _option_values(options.split())
    uncarried = [name for name in UNCARRIED_OPTIONS if options.get(name)]
    if not uncarried:
        return None
    return (
        f"{', '.join(uncarried)} cannot be sent to the workers (a task names its job and config files only, "
        "never options): put these settings into a config file and pass it with --configfile"
    )


def _inside_or_absolute(path: str, workdir: str) -> str:
    """Relative to workdir when inside it (the worker resolves it against ITS view of the workflow directory)."""
    absolute = os.path.normpath(os.path.join(workdir, path))
    relative = os.path.relpath(absolute, workdir)
    return absolute if relative == ".." or relative.startswith("../") else relative


def job_step_fields(command: str, workdir: str, jobs: list[Any]) -> JobStepFields:
    """What a worker needs to rebuild the job step that Snakemake would run for this job, read from Snakemake's
    own job step command (so it follows the installed Snakemake): never the command itself."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    options = _option_values(tokens)
    refusal = uncarried_refusal(options)
    if refusal:
        raise ValueError(refusal)

    def integer(name: str, default: int) -> int:
        try:
            return int((options.get(name) or [default])[0])
        except ValueError:
            return default

    target_jobs = options.get("--target-jobs") or [
        f"{j.rule.name}:" + ",".join(f"{k}={v}" for k, v in dict(j.wildcards.items()).items()) for j in jobs
    ]
    local_groupid = options.get("--local-groupid")
    return {
        "configfiles": [_inside_or_absolute(p, workdir) for p in options.get("--configfiles") or []],
        "target_jobs": list(target_jobs),
        "local_groupid": local_groupid[0] if local_groupid else None,  # a group job's id (a uuid)
        "attempt": integer("--attempt", (getattr(jobs[0], "attempt", 1) if jobs else 1) or 1),
        "latency_wait": integer("--latency-wait", 5),
        "wait_for_files": [_inside_or_absolute(p, workdir) for p in options.get("--wait-for-files") or []],
    }


def build_task_spec(job: Any, *, workdir: str, snakefile: str, command: str) -> TaskSpec:
    """The task for one (possibly grouped) Snakemake job."""
    workdir = os.path.realpath(workdir)
    jobs = _single_jobs(job)
    rules = [j.rule.name for j in jobs]
    wildcards = [{k: str(v) for k, v in dict(j.wildcards.items()).items()} for j in jobs]
    outputs = sorted({os.path.normpath(os.path.join(workdir, str(f))) for j in jobs for f in j.output})
    logs = sorted({os.path.normpath(os.path.join(workdir, str(f))) for j in jobs for f in j.log})
    policies = {identity for j in jobs if (identity := _policy_identity(j)) is not None}
    if len(policies) > 1:
        raise ValueError(f"group job {job.name} mixes several policies; group only batches of one policy")
    identity = next(iter(policies), None)
    snakefile_abs = os.path.normpath(os.path.join(workdir, snakefile))
    key = _canonical(
        {
            "workdir": workdir,
            "snakefile": snakefile_abs,
            "rules": rules,
            "wildcards": wildcards,
            "outputs": [os.path.relpath(p, workdir) for p in outputs],
            "policy": identity,
        }
    )
    task_id = short_id(key)
    gpus = max(_int_resource(j.resources, "gpu") for j in jobs)
    label = ",".join(f"{k}={v}" for wc in wildcards for k, v in wc.items())
    name = f"{'+'.join(dict.fromkeys(rules))}[{label}]" if label else "+".join(dict.fromkeys(rules))
    fields = job_step_fields(command, workdir, jobs)
    payload = TaskPayload(
        workdir=workdir,
        snakefile=snakefile_abs,
        configfiles=tuple(fields["configfiles"]),
        rules=tuple(rules),
        wildcards=tuple(tuple(wc.items()) for wc in wildcards),
        target_jobs=tuple(fields["target_jobs"]),
        local_groupid=fields["local_groupid"],
        attempt=fields["attempt"],
        latency_wait=fields["latency_wait"],
        wait_for_files=tuple(fields["wait_for_files"]),
        outputs=tuple(outputs),
        logs=tuple(logs),
        gpus=gpus,
        policy_identity=identity,
    )
    metadata: TaskMetadata = {
        "campaign": campaign_key(workdir),
        "workflow": workdir,
        "rule": rules[0] if len(rules) == 1 else "group",
    }
    return TaskSpec(task_id=task_id, name=name[:MAX_NAME_CHARS], payload=payload, metadata=metadata)
