"""Worker behaviour with real workers and real Snakemake runs: policy server reuse, Ctrl-C of the submitter.

A worker stopped mid-batch (SIGTERM, Ctrl-C) and killed (kill -9): tests/plugin/test_campaign_faults.py."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SNAKEFILE, run_snakemake, standin_config, write_config
from labtasker_testkit import (
    LABTASKER_PROFILE,
    REPO,
    all_tasks,
    client,
    labtasker_url,
    queue,
    status_of,
    wait_for,
    workers,
)

pytestmark = pytest.mark.slow


def labtasker_args(url: str, queue: str, configfile: Path) -> list[str]:
    return [*LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", url, "--labtasker-queue", queue]


def test_one_policy_server_per_identity_across_batches_and_slots(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    section = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 6, "batch_size": 2, "max_steps": 20}
    config = standin_config(workdir, standin=section)
    configfile = write_config(workdir / "campaign.yaml", config)
    _, log_dir = workers.start("solo", gpus="0", allow=[workdir, REPO], extra=["--slots", "2"])
    run_snakemake(workdir, *labtasker_args(labtasker_url, queue, configfile))
    status = status_of(log_dir)
    assert status["tasks"]["succeeded"] == 4  # 1 manifest + 3 batches
    assert status["policy_server_loads"] == 1
    first_identity = status["policy_identity"]

    config["policy"]["command"] += " --latency-s 0"  # a different policy identity: the batches rerun
    write_config(configfile, config)
    run_snakemake(workdir, *labtasker_args(labtasker_url, queue, configfile))
    status = status_of(log_dir)
    assert status["tasks"]["succeeded"] == 7
    assert status["policy_server_loads"] == 2, "one restart for the new identity"
    assert status["policy_identity"] != first_identity
    assert len(list((log_dir / "policy").glob("policy-server-*.log"))) == 2
    assert len(all_tasks(client)) == 7


def test_ctrl_c_cancels_the_queued_tasks(labtasker_url, queue, client, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir))
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *labtasker_args(labtasker_url, queue, configfile),
    ]  # fmt: skip
    with open(tmp_path / "snakemake.log", "wb") as out:
        submitter = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(all_tasks(client)) == 3, 120, "the three manifest tasks (no worker: they stay queued)")
        submitter.send_signal(signal.SIGINT)
        submitter.wait(60)
    finally:
        if submitter.poll() is None:
            submitter.kill()
    tasks = all_tasks(client)
    assert {t.status for t in tasks} == {"cancelled"}, (tmp_path / "snakemake.log").read_text()[-3000:]


def test_a_worker_whose_queue_is_deleted_says_so_once_and_exits(queue, client, workers, tmp_path):
    """`make clean FORCE=1` (or an admin) deletes the queue under a live worker: it stops with a distinct status
    instead of logging `claim refused: queue_not_found` every few seconds forever."""
    process, log_dir = workers.start("w", allow=[tmp_path])
    wait_for(lambda: status_of(log_dir).get("state") == "running", 60, "the worker to run")
    client.delete_queue(queue, cascade=True)
    assert process.wait(30) == 3, "the worker keeps polling a deleted queue"
    out = (log_dir / "worker.out").read_text()
    assert out.count(f"queue {queue} no longer exists") == 1, out
    assert "claim refused" not in out, out
    assert status_of(log_dir)["state"] == "stopped"
