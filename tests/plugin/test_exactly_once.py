"""Exactly once (DESIGN invariant 7) across a second submitter: real server, worker and `snakemake` processes.

A batch that finishes after a second submitter has planned it, but before that submitter submits it, is adopted
(its output exists and its task succeeded) and never evaluated a second time.
"""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SNAKEFILE, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, all_tasks, client, labtasker_url, queue, wait_for, workers

pytestmark = pytest.mark.slow
HOOKS = Path(__file__).resolve().parent / "hooks"


def submitter(workdir: Path, url: str, queue: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    configfile = workdir / "campaign.yaml"
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", url, "--labtasker-queue", queue,
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(
            command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )


def job_step_runs(workdir: Path, task_id: str) -> int:
    """One log per job-step execution of a task (the worker names it after the claim's run id)."""
    return len(list((workdir / ".snakemake" / "labtasker" / "tasks" / task_id).glob("*.log")))


def test_batch_finished_while_a_second_submitter_plans_it_is_adopted(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    config = standin_config(
        workdir,
        standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2, "max_steps": 20,
                 "step_time_s": {"default": 0.15}},
    )  # fmt: skip
    write_config(workdir / "campaign.yaml", config)
    workers.start("w", allow=[workdir, REPO])
    first = submitter(workdir, labtasker_url, queue, tmp_path / "first.log")

    def running_batch():
        return next((t for t in all_tasks(client) if t.name.startswith("evaluate_batch") and t.status == "running"), 0)

    batch = wait_for(running_batch, 120, "the batch to be running")
    hold = tmp_path / "hold"
    hold.touch()
    pythonpath = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    second = submitter(
        workdir, labtasker_url, queue, tmp_path / "second.log",
        env={"PYTHONPATH": pythonpath, "EVALWF_TEST_HOLD_SUBMIT": str(hold)},
    )  # fmt: skip
    wait_for(lambda: Path(str(hold) + ".held").exists(), 120, "the second submitter to plan the running batch")
    wait_for(lambda: client.get_task(batch.id).status == "succeeded", 120, "the batch to succeed")
    assert first.wait(120) == 0, (tmp_path / "first.log").read_text()[-3000:]
    hold.unlink()
    assert second.wait(120) == 0, (tmp_path / "second.log").read_text()[-3000:]
    log = (tmp_path / "second.log").read_text()
    assert f"task {batch.id}: adopted" in log, log[-3000:]
    assert job_step_runs(workdir, batch.id) == 1, "the finished batch was evaluated again"
    assert client.get_task(batch.id).status == "succeeded"
