"""The queue task (evalwf/contract/task_payload.py): what the plugin builds is what a worker parses, field for field,
and each malformed field is refused naming it, before any file of the task is looked at. What needs the worker's
allowed directories and the campaign's plan (code files, jobs, outputs, policy) is in tests/worker/test_trust.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalwf.contract import PAYLOAD_VERSION, campaign_key
from evalwf.contract.task_payload import TaskPayload, TaskRefused
from snakemake_executor_plugin_labtasker.task_identity import build_task_spec

WILDCARDS = {"run": "t", "benchmark": "standin", "suite": "alpha", "task": "reach", "batch": "0000-2"}
TARGET = "evaluate_batch:" + ",".join(f"{k}={v}" for k, v in WILDCARDS.items())
POLICY = {"name": "p", "command": "{python} -m benchmarks.standin.policy_server --port {port}"}


def _job(batch: str) -> SimpleNamespace:
    wildcards = {**WILDCARDS, "batch": batch}
    return SimpleNamespace(
        name="evaluate_batch",
        rule=SimpleNamespace(name="evaluate_batch"),
        wildcards=SimpleNamespace(items=lambda: wildcards.items()),
        output=[f"results/t/{batch}.json"],
        log=[f"logs/{batch}.log"],
        params=SimpleNamespace(policy=POLICY, policy_identity="p@0123456789abcdef"),
        resources={"gpu": 1},
        attempt=2,
    )


def _group(workdir: Path) -> SimpleNamespace:
    """A group job of two batches, as Snakemake hands it to the executor."""
    jobs = [_job("0000-2"), _job("0002-2")]
    return SimpleNamespace(name="g", is_group=lambda: True, jobs=jobs)


def _payload_args(workdir: Path) -> dict:
    """What the plugin submits for a group job of two batches of a real Snakemake job step command."""
    targets = " ".join(f"'{TARGET.replace('0000-2', b)}'" for b in ("0000-2", "0002-2"))
    command = (
        f"python -m snakemake --snakefile {workdir}/workflow/Snakefile --target-jobs {targets} --attempt 2 "
        "--local-groupid 0b5e8c3e-1f2a-4e2b-9c39-2a3d4e5f6a7b --latency-wait 30 "
        f"--wait-for-files {workdir}/.snakemake/tmp.x --configfiles {workdir}/campaign.yaml --mode remote"
    )
    spec = build_task_spec(_group(workdir), workdir=str(workdir), snakefile="workflow/Snakefile", command=command)
    return spec.args


def test_what_the_plugin_builds_the_worker_parses_field_for_field(tmp_path):
    """plugin build -> JSON (what Labtasker stores) -> worker parse gives the same payload, and its args again."""
    workdir = tmp_path.resolve()
    job = _group(workdir)
    spec = build_task_spec(job, workdir=str(workdir), snakefile="workflow/Snakefile", command="python -m snakemake")
    stored = json.loads(json.dumps(spec.args))
    parsed = TaskPayload.parse(stored)
    assert parsed == spec.payload
    assert parsed.to_task_args() == stored

    args = _payload_args(workdir)
    parsed = TaskPayload.parse(json.loads(json.dumps(args)))
    assert parsed.to_task_args() == args
    assert parsed.configfiles == ("campaign.yaml",) and parsed.wait_for_files == (".snakemake/tmp.x",)
    assert parsed.local_groupid == "0b5e8c3e-1f2a-4e2b-9c39-2a3d4e5f6a7b" and parsed.attempt == 2
    assert parsed.latency_wait == 30 and parsed.gpus == 1 and parsed.policy_identity == "p@0123456789abcdef"
    assert parsed.rules == ("evaluate_batch", "evaluate_batch") and len(parsed.target_jobs) == 2
    assert parsed.outputs == (f"{workdir}/results/t/0000-2.json", f"{workdir}/results/t/0002-2.json")
    assert parsed.campaign == campaign_key(str(workdir)) == args["campaign"]
    assert [dict(job.wildcards) for job in parsed.named_jobs()] == parsed.wildcard_maps()
    assert set(args) == {
        *("kind", "version", "campaign", "workdir", "snakefile", "configfiles", "rules", "wildcards"),
        *("target_jobs", "local_groupid", "attempt", "latency_wait", "wait_for_files", "outputs", "logs"),
        *("resources", "policy_identity"),
    }, "the version-2 key set: tasks already queued parse unchanged"


def _one_job_args(workdir: Path) -> dict:
    return {
        "kind": "snakemake-job-step",
        "version": PAYLOAD_VERSION,
        "campaign": campaign_key(str(workdir)),
        "workdir": str(workdir),
        "snakefile": f"{workdir}/workflow/Snakefile",
        "configfiles": ["campaign.yaml"],
        "rules": ["evaluate_batch"],
        "wildcards": [dict(WILDCARDS)],
        "target_jobs": [TARGET],
        "local_groupid": None,
        "attempt": 1,
        "latency_wait": 5,
        "wait_for_files": [],
        "outputs": [f"{workdir}/results/t/0000-2.json"],
        "logs": [],
        "resources": {"gpu": 1},
        "policy_identity": "p@0123456789abcdef",
    }


# field -> (a malformed value, what the refusal must name); None as value: the key is removed
MALFORMED = {
    "kind": ("shell", "not a Snakemake job step task"),
    "version": (1, "payload version '1'"),
    "command": ("rm -rf /", "keys a worker never takes from a task: command"),
    "policy": ({"command": "touch /tmp/x"}, "keys a worker never takes from a task: policy"),
    "workdir": ("relative/dir", "is not an absolute path"),
    "campaign": ("c_0000000000000000", "is not the one of its workflow directory"),
    "snakefile": ("workflow/Snakefile", "is not an absolute path"),
    "configfiles": ("campaign.yaml", "configfiles must be a list of strings"),
    "rules": (["all; rm"], "rules must be rule names"),
    "target_jobs": ([], "names no target job"),
    "wildcards": ([{"run": 1}], "wildcards must map wildcard names to strings"),
    "local_groupid": ("x --config results_dir=/tmp/x", "local_groupid must be a Snakemake group job id"),
    "attempt": ("1 --config x", "attempt must be an integer in [1, 1000]"),
    "latency_wait": (10**9, "latency_wait must be an integer in [0, 3600]"),
    "wait_for_files": ([""], "wait_for_files must be a non-empty string"),
    "outputs": ([1], "outputs must be a non-empty string"),
    "logs": (["relative.log"], "logs must be absolute paths"),
    "resources": ({"gpu": 1, "mem_mb": "1; rm -rf /"}, "resources must be a mapping of ['gpu']"),
    "policy_identity": (7, "policy_identity must be a non-empty string"),
}
# how a target job or its rules and wildcards can disagree
MISMATCHED = {
    "option-as-target-job": ({"target_jobs": ["--config", "results_dir=/tmp/x"]}, "target job '--config'"),
    "foreign-rule": ({"target_jobs": ["other_rule:run=t"]}, "for one of the rules ['evaluate_batch']"),
    "wildcard-twice": ({"target_jobs": [TARGET + ",run=u"]}, "names a wildcard twice"),
    "rules-not-the-jobs": ({"rules": ["evaluate_batch", "plan_manifest"]}, "are not the rules of the target jobs"),
    "wildcards-not-the-jobs": ({"wildcards": [{"run": "t"}]}, "are not those of the target jobs"),
    "resources-negative": ({"resources": {"gpu": -1}}, "resources.gpu must be an integer"),
}


@pytest.mark.parametrize("field", sorted(MALFORMED))
def test_each_malformed_field_is_refused_naming_it(tmp_path, field):
    value, reason = MALFORMED[field]
    args = _one_job_args(tmp_path)
    args[field] = value
    with pytest.raises(TaskRefused) as refused:
        TaskPayload.parse(args)
    assert reason in str(refused.value)


@pytest.mark.parametrize("case", sorted(MISMATCHED))
def test_target_jobs_rules_and_wildcards_must_agree(tmp_path, case):
    change, reason = MISMATCHED[case]
    with pytest.raises(TaskRefused) as refused:
        TaskPayload.parse({**_one_job_args(tmp_path), **change})
    assert reason in str(refused.value)


def test_a_payload_that_is_not_a_mapping_is_refused():
    with pytest.raises(TaskRefused, match="not a mapping"):
        TaskPayload.parse(["kind", "snakemake-job-step"])


def test_a_well_formed_payload_parses_and_names_its_jobs(tmp_path):
    payload = TaskPayload.parse(_one_job_args(tmp_path))
    assert [(job.rule, dict(job.wildcards)) for job in payload.named_jobs()] == [("evaluate_batch", WILDCARDS)]
