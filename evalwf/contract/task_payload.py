"""The queue task: what the executor plugin submits for one Snakemake job and a worker parses (invariant 14).

A TaskPayload only NAMES a job of a workflow directory (rules, wildcards, Snakemake's --target-jobs entries, config
files, attempt, latency wait, files to wait for, outputs, logs, the GPUs it uses, the policy identity); it never
carries a command or a policy block (invariant 6). The plugin builds one and sends `to_task_args()`; a worker reads
a task's args with `TaskPayload.parse`, which checks shape and types only (what the payload says about itself);
checking it against the worker's allowed directories and its campaign's plan is the worker's
(evalwf/worker/job_payload.py). Standard library only: the light core imports it on Python 3.10.

The wire format is version 2's key set, unchanged: a task already in a live queue parses as before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from evalwf.contract import PAYLOAD_KEYS, PAYLOAD_KIND, PAYLOAD_RESOURCES, PAYLOAD_VERSION, resolved_campaign_key

RULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Snakemake's --target-jobs entry: rule:key=value,key=value (no control characters, no commas in values)
_PAIR = r"[A-Za-z_][A-Za-z0-9_]*=[^,=\x00-\x1f\x7f]*"
TARGET_JOB = re.compile(rf"([A-Za-z_][A-Za-z0-9_]*):((?:{_PAIR})(?:,{_PAIR})*)?")
GROUP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")  # a group job's id: the uuid of its last job
MAX_LIST = 10_000
MAX_TEXT = 4096
MAX_LATENCY_WAIT_S = 3600
MAX_ATTEMPT = 1000
MAX_GPUS = 1024


class TaskRefused(Exception):
    """A malformed or hostile payload: the task is failed with this reason."""


class TaskResources(TypedDict):
    gpu: int


class TaskArgs(TypedDict):
    """The JSON record a Labtasker task's `args` holds (version 2)."""

    kind: str
    version: int
    campaign: str
    workdir: str
    snakefile: str
    configfiles: list[str]
    rules: list[str]
    wildcards: list[dict[str, str]]
    target_jobs: list[str]
    local_groupid: str | None
    attempt: int
    latency_wait: int
    wait_for_files: list[str]
    outputs: list[str]
    logs: list[str]
    resources: TaskResources
    policy_identity: str | None


@dataclass(frozen=True)
class TargetJob:
    """One --target-jobs entry, 'rule:key=value,...', read."""

    rule: str
    wildcards: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, entry: str, rules: tuple[str, ...]) -> TargetJob:
        match = TARGET_JOB.fullmatch(entry)
        if match is None or match.group(1) not in rules:
            raise TaskRefused(
                f"target job {entry[:200]!r} is not 'rule:key=value,...' for one of the rules {list(rules)}"
            )
        pairs = [tuple(pair.split("=", 1)) for pair in match.group(2).split(",")] if match.group(2) else []
        if len(dict(pairs)) != len(pairs):
            raise TaskRefused(f"target job {entry[:200]!r} names a wildcard twice")
        return cls(match.group(1), tuple((key, value) for key, value in pairs))


def target_job_wildcards(entry: str) -> dict[str, str]:
    """The wildcards of a --target-jobs entry already checked against TARGET_JOB ('rule:key=value,...')."""
    pairs = entry.partition(":")[2]
    return dict(pair.split("=", 1) for pair in pairs.split(",")) if pairs else {}


@dataclass(frozen=True)
class TaskPayload:
    """One queue task, typed. Paths as the submitter resolved them: workdir, snakefile, outputs and logs absolute;
    configfiles and wait_for_files relative to workdir when inside it."""

    workdir: str
    snakefile: str
    configfiles: tuple[str, ...]
    rules: tuple[str, ...]
    wildcards: tuple[tuple[tuple[str, str], ...], ...]  # per job, its (name, value) pairs in the rule's order
    target_jobs: tuple[str, ...]
    local_groupid: str | None  # a group job's id (a uuid string), else None
    attempt: int
    latency_wait: int
    wait_for_files: tuple[str, ...]
    outputs: tuple[str, ...]
    logs: tuple[str, ...]
    gpus: int
    policy_identity: str | None  # the policy its jobs evaluate; None for a job that evaluates none

    @property
    def campaign(self) -> str:
        """Derived from the workflow directory, never believed from a payload (status rounds select by it)."""
        return resolved_campaign_key(self.workdir)

    def wildcard_maps(self) -> list[dict[str, str]]:
        return [dict(pairs) for pairs in self.wildcards]

    def named_jobs(self) -> list[TargetJob]:
        """Its target jobs, read (each already checked by parse)."""
        return [TargetJob.parse(entry, self.rules) for entry in self.target_jobs]

    def to_task_args(self) -> TaskArgs:
        """The JSON record Labtasker stores (the version-2 key set, as before this class)."""
        return {
            "kind": PAYLOAD_KIND,
            "version": PAYLOAD_VERSION,
            "campaign": self.campaign,
            "workdir": self.workdir,
            "snakefile": self.snakefile,
            "rules": list(self.rules),
            "wildcards": self.wildcard_maps(),
            "configfiles": list(self.configfiles),
            "target_jobs": list(self.target_jobs),
            "local_groupid": self.local_groupid,
            "attempt": self.attempt,
            "latency_wait": self.latency_wait,
            "wait_for_files": list(self.wait_for_files),
            "outputs": list(self.outputs),
            "logs": list(self.logs),
            "resources": {"gpu": self.gpus},
            "policy_identity": self.policy_identity,
        }

    @classmethod
    def parse(cls, args: object) -> TaskPayload:
        """A task's args, checked for shape and types (what a payload says about itself); TaskRefused naming the
        field that is wrong. Whether the job is one this worker may run is the worker's check."""
        if not isinstance(args, dict):
            raise TaskRefused("the payload is not a mapping")
        if args.get("kind") != PAYLOAD_KIND:
            raise TaskRefused(f"not a Snakemake job step task (kind={str(args.get('kind'))[:80]!r})")
        if args.get("version") != PAYLOAD_VERSION:
            raise TaskRefused(
                f"payload version {str(args.get('version'))[:20]!r}, this worker reads version {PAYLOAD_VERSION} "
                "(submitter and worker from different releases?)"
            )
        unknown = sorted(str(key)[:60] for key in args if key not in PAYLOAD_KEYS)
        if unknown:
            raise TaskRefused(
                f"the payload carries keys a worker never takes from a task: {', '.join(unknown)} (a task names its "
                "job; commands and the policy come from the allowed workflow directory)"
            )
        workdir = _text(args.get("workdir"), "workdir")
        if not os.path.isabs(workdir):
            raise TaskRefused(f"the workflow directory {workdir!r} is not an absolute path")
        campaign = resolved_campaign_key(workdir)
        if args.get("campaign") != campaign:
            raise TaskRefused(
                f"the payload's campaign {str(args.get('campaign'))[:40]!r} is not the one of its workflow directory "
                f"{workdir} ({campaign})"
            )
        snakefile = _text(args.get("snakefile"), "snakefile")
        if not os.path.isabs(snakefile):
            raise TaskRefused(f"Snakefile {snakefile} is not an absolute path")
        rules = tuple(_texts(args.get("rules"), "rules"))
        if not rules or any(not RULE_NAME.fullmatch(rule) for rule in rules):
            raise TaskRefused(f"rules must be rule names (got {list(rules[:5])!r})")
        target_jobs = tuple(_texts(args.get("target_jobs"), "target_jobs"))
        if not target_jobs:
            raise TaskRefused("the payload names no target job")
        named = [TargetJob.parse(entry, rules) for entry in target_jobs]
        if sorted(rules) != sorted(job.rule for job in named):
            raise TaskRefused(f"rules {list(rules[:5])} are not the rules of the target jobs {list(target_jobs[:5])}")
        wildcards = _wildcards(args.get("wildcards"))
        if sorted(sorted(w.items()) for w in wildcards) != sorted(sorted(job.wildcards) for job in named):
            raise TaskRefused(f"wildcards {str(args.get('wildcards'))[:200]} are not those of the target jobs")
        local_groupid = args.get("local_groupid")
        if local_groupid is not None and (not isinstance(local_groupid, str) or not GROUP_ID.fullmatch(local_groupid)):
            raise TaskRefused(f"local_groupid must be a Snakemake group job id (got {str(local_groupid)[:80]!r})")
        logs = tuple(_texts(args.get("logs"), "logs"))
        if any(not os.path.isabs(path) for path in logs):
            raise TaskRefused("logs must be absolute paths")
        identity = args.get("policy_identity")
        return cls(
            workdir=workdir,
            snakefile=snakefile,
            configfiles=tuple(_texts(args.get("configfiles"), "configfiles")),
            rules=rules,
            wildcards=tuple(tuple(w.items()) for w in wildcards),
            target_jobs=target_jobs,
            local_groupid=local_groupid,
            attempt=_integer(args.get("attempt"), "attempt", 1, MAX_ATTEMPT),
            latency_wait=_integer(args.get("latency_wait"), "latency_wait", 0, MAX_LATENCY_WAIT_S),
            wait_for_files=tuple(_texts(args.get("wait_for_files"), "wait_for_files")),
            outputs=tuple(_texts(args.get("outputs"), "outputs")),
            logs=logs,
            gpus=_resources(args.get("resources")),
            policy_identity=None if identity is None else _text(identity, "policy_identity"),
        )


def payload_campaign(args: object) -> str | None:
    """The campaign of a task's args, derived from its workflow directory, for a worker's list of campaigns it
    does not serve; None when the payload's own `campaign` says otherwise (TaskPayload.parse refuses such a task)."""
    workdir = args.get("workdir") if isinstance(args, dict) else None
    if not isinstance(workdir, str) or not os.path.isabs(workdir):
        return None
    derived = resolved_campaign_key(workdir)
    return derived if isinstance(args, dict) and args.get("campaign") == derived else None


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value or len(value) > MAX_TEXT:
        raise TaskRefused(f"{what} must be a non-empty string (got {type(value).__name__})")
    return value


def _texts(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise TaskRefused(f"{what} must be a list of strings")
    return [_text(item, what) for item in value]


def _integer(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TaskRefused(f"{what} must be an integer in [{low}, {high}] (got {value!r})")
    return value


def _wildcards(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise TaskRefused("wildcards must be a list of mappings (one per job)")
    for item in value:
        if not isinstance(item, dict) or any(
            not isinstance(v, str) or not RULE_NAME.fullmatch(str(k)) for k, v in item.items()
        ):
            raise TaskRefused(f"wildcards must map wildcard names to strings (got {str(item)[:200]})")
    return value


def _resources(value: object) -> int:
    """The GPUs of a payload's resources mapping (PAYLOAD_RESOURCES only)."""
    if not isinstance(value, Mapping) or set(value) - PAYLOAD_RESOURCES:
        raise TaskRefused(f"resources must be a mapping of {sorted(PAYLOAD_RESOURCES)} (got {str(value)[:200]})")
    return _integer(value.get("gpu", 0), "resources.gpu", 0, MAX_GPUS)
