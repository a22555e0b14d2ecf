"""Whole campaigns through Labtasker: real server on loopback, real workers, real `snakemake --profile
profiles/labtasker` runs, compared with the local profile."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import SNAKEFILE, run_snakemake, standin_config, write_config
from labtasker_testkit import (
    DEAD_PROXY,
    LABTASKER_PROFILE,
    LOCAL_PROFILE,
    REPO,
    all_tasks,
    client,
    embedded_client,
    labtasker_url,
    queue,
    wait_for,
    workers,
)

pytestmark = pytest.mark.slow

STANDIN = Path("results") / "t" / "standin"
SUCCESS_COLUMNS = ["suite", "task", "successes", "episodes", "success_rate", "status"]
REMOTE_JOBS = 6  # 2 manifests + 2 tasks x 2 batches
# a task in each of two suites (the summary's average over suites), two batches per task (a group of two)
SECTION = {"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 4}


def campaign_config(workdir: Path) -> Path:
    return write_config(workdir / "campaign.yaml", standin_config(workdir, standin=SECTION))


def summaries(workdir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    root = workdir / "results" / "t" / "standin"
    tasks = pd.read_csv(root / "task_summary.csv")[SUCCESS_COLUMNS].sort_values(["suite", "task"], ignore_index=True)
    suites = pd.read_csv(root / "suite_summary.csv")
    return tasks, suites[["suite", "successes", "episodes", "success_rate"]]


def batch_records(workdir: Path) -> dict[str, list[dict]]:
    root = workdir / "results" / "t" / "standin" / "batches"
    return {str(p.relative_to(root)): json.loads(p.read_text())["episodes"] for p in sorted(root.rglob("*.json"))}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("local")
    run_snakemake(workdir, *LOCAL_PROFILE, "--configfile", str(campaign_config(workdir)))
    return workdir


# The submitter looks at the queue every second (the profile's 2 s is for real campaigns): these tests wait for its
# rounds, and what they check does not depend on how often it looks.
STATUS_EVERY_S = ["--seconds-between-status-checks", "1"]


def labtasker_args(url: str, queue: str, configfile: Path) -> list[str]:
    return [
        *LABTASKER_PROFILE, *STATUS_EVERY_S, "--configfile", str(configfile), "--labtasker-url", url,
        "--labtasker-queue", queue,
    ]  # fmt: skip


def test_two_workers_reproduce_the_local_profile_despite_a_dead_proxy(
    local_run, labtasker_url, queue, client, workers, tmp_path
):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = campaign_config(workdir)
    supervisor, log_dir = workers.start("pair", gpus="0,1", allow=[workdir, REPO], env=DEAD_PROXY)
    started = time.monotonic()
    run_snakemake(workdir, *labtasker_args(labtasker_url, queue, configfile), env=DEAD_PROXY)
    elapsed = time.monotonic() - started

    remote, local = summaries(workdir), summaries(local_run)
    pd.testing.assert_frame_equal(remote[0], local[0])
    pd.testing.assert_frame_equal(remote[1], local[1])
    assert same_flags(batch_records(workdir), batch_records(local_run))
    tasks = all_tasks(client)
    assert len(tasks) == REMOTE_JOBS and {t.status for t in tasks} == {"succeeded"}
    # one worker process per GPU, each keeping ONE policy server across all its batches
    statuses = [json.loads(p.read_text()) for p in sorted(log_dir.glob("gpu*/status.json"))]
    assert [s["gpu"] for s in statuses] == ["0", "1"]
    assert sum(s["tasks"]["succeeded"] for s in statuses) == REMOTE_JOBS
    assert all(s["policy_server_loads"] <= 1 for s in statuses)
    runs = sorted((t.finished_at - t.started_at).total_seconds() for t in tasks)
    print(
        f"\nlabtasker campaign of {REMOTE_JOBS} jobs on 2 workers: {elapsed:.1f}s; job step on a worker: median "
        f"{runs[len(runs) // 2]:.2f}s, max {runs[-1]:.2f}s"
    )

    # the same campaign submitted again: nothing to do, no new task
    again = run_snakemake(workdir, *labtasker_args(labtasker_url, queue, configfile), env=DEAD_PROXY)
    assert "Nothing to be done" in again.stdout + again.stderr
    assert len(all_tasks(client)) == REMOTE_JOBS
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0


def test_killed_snakemake_rerun_reattaches_and_finishes_on_the_embedded_server(local_run, queue, workers, tmp_path):
    """No URL anywhere: the worker and snakemake share the embedded server of the workflow directory."""
    from evalwf.queue.embedded_server import stop_embedded_server

    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = campaign_config(workdir)
    arguments = [*LABTASKER_PROFILE, *STATUS_EVERY_S, "--configfile", str(configfile), "--labtasker-queue", queue]
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        *arguments,
    ]
    environment = {k: v for k, v in os.environ.items() if k != "LABTASKER_URL"}
    try:
        workers.start("pair", gpus="0,1", allow=[workdir, REPO], embedded=True)
        with open(tmp_path / "first.log", "wb") as out:
            first = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=environment)
        batches = workdir / "results" / "t" / "standin" / "batches"
        wait_for(lambda: len(list(batches.rglob("*.json"))) >= 2, 180, "two finished batches")
        first.send_signal(signal.SIGKILL)
        first.wait()
        with embedded_client(workdir, queue) as client:
            submitted_before = {t.id for t in all_tasks(client)}
            assert 0 < len(submitted_before) <= REMOTE_JOBS

            completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=environment)
            assert completed.returncode == 0, completed.stderr[-6000:]
            tasks = all_tasks(client)
        assert len(tasks) == REMOTE_JOBS and {t.status for t in tasks} == {"succeeded"}
        assert submitted_before <= {t.id for t in tasks}, "the rerun found the same task ids"
        runs = {t.name: job_step_runs(workdir, t.id) for t in tasks}
        assert set(runs.values()) == {1}, f"every job evaluated exactly once; job-step runs per task: {runs}"
        remote, local = summaries(workdir), summaries(local_run)
        pd.testing.assert_frame_equal(remote[0], local[0])
        for name in ("task_summary.csv", "suite_summary.csv"):
            assert (workdir / STANDIN / name).read_bytes() == (local_run / STANDIN / name).read_bytes(), name
        assert same_flags(batch_records(workdir), batch_records(local_run))
    finally:
        workers.stop_all()
        stop_embedded_server(workdir / ".labtasker")


def job_step_runs(workdir: Path, task_id: str) -> int:
    """One log per job-step execution of a task (the worker names it after the claim's run id)."""
    return len(list((workdir / ".snakemake" / "labtasker" / "tasks" / task_id).glob("*.log")))


def same_flags(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> bool:
    def flags(records: dict[str, list[dict]]) -> dict[str, list[tuple[int, bool]]]:
        return {k: [(e["index"], e["success"]) for e in v] for k, v in records.items()}

    return flags(a) == flags(b)


def test_grouped_batches_run_as_one_job_step_per_group(local_run, labtasker_url, queue, client, workers, tmp_path):
    """`--groups` / `--group-components` (several batches per task, one job step): the payload names every job of
    the group, the worker runs them in one `--local-groupid` job step, results match the local profile."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = campaign_config(workdir)
    workers.start("w", allow=[workdir, REPO])
    grouping = ["--groups", "evaluate_batch=batches", "--group-components", "batches=2"]
    run_snakemake(workdir, *labtasker_args(labtasker_url, queue, configfile), *grouping)

    remote, local = summaries(workdir), summaries(local_run)
    pd.testing.assert_frame_equal(remote[0], local[0])
    assert same_flags(batch_records(workdir), batch_records(local_run))
    tasks = all_tasks(client)
    groups = [task for task in tasks if task.args["local_groupid"] is not None]
    assert len(groups) == 2 and all(len(task.args["target_jobs"]) == 2 for task in groups), [
        task.args["target_jobs"] for task in tasks
    ]
    assert len(tasks) == 2 + 2  # the two manifests, then four batches in two tasks
    assert {task.status for task in tasks} == {"succeeded"}
