"""The queue task for one batch of the stand-in campaign, built with TaskPayload as the executor plugin builds it:
the worker's tests start from it and change one wire field at a time (an attack may break a field's type, so the
changes apply to the wire record, not to the typed value)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from conftest import SNAKEFILE, standin_config, write_config

from evalwf.contract.task_payload import TaskPayload
from evalwf.plan.config import load_config

# a batch the stand-in campaign (conftest.standin_config) plans: task alpha/reach, episodes 0-1
BATCH_WILDCARDS = (("run", "t"), ("benchmark", "standin"), ("suite", "alpha"), ("task", "reach"), ("batch", "0000-2"))
BATCH_TARGET_JOB = "evaluate_batch:" + ",".join(f"{key}={value}" for key, value in BATCH_WILDCARDS)


def standin_batch_output(workdir: Path, run: str = "t") -> Path:
    """Where the batch of BATCH_WILDCARDS is written in the stand-in campaign run from `workdir`."""
    return workdir / "results" / run / "standin" / "batches" / "alpha" / "reach" / "0000-2.json"


def standin_batch_task(workdir: Path, *, wait_for_files: Sequence[str] = (), **changes: object) -> dict[str, object]:
    """The task args the plugin submits for the batch of BATCH_WILDCARDS from `workdir` (its campaign.yaml is the
    stand-in campaign, written here unless a test wrote its own), with `changes` applied to the wire record. The
    policy identity is the campaign's unless `changes` gives one."""
    configfile = workdir / "campaign.yaml"
    if not configfile.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        write_config(configfile, standin_config(workdir))
    if "policy_identity" in changes:
        identity = None  # replaced below by the change
    else:
        (policy,) = load_config(configfile).policies
        identity = policy.identity
    task = TaskPayload(
        workdir=str(workdir),
        snakefile=str(SNAKEFILE),
        configfiles=("campaign.yaml",),
        rules=("evaluate_batch",),
        wildcards=(BATCH_WILDCARDS,),
        target_jobs=(BATCH_TARGET_JOB,),
        local_groupid=None,
        attempt=1,
        latency_wait=5,
        wait_for_files=tuple(wait_for_files),
        outputs=(str(standin_batch_output(workdir)),),
        logs=(),
        gpus=1,
        policy_identity=identity,
    )
    args: dict[str, object] = dict(task.to_task_args())
    args.update(changes)
    return args
