"""Worker behaviour with real workers and real Snakemake runs: hand-back on SIGTERM, policy server reuse."""

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
    wait_for,
    workers,
)

from evalwf.worker.procfs import descendants

pytestmark = pytest.mark.slow


def labtasker_args(url: str, queue: str, configfile: Path) -> list[str]:
    return [*LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", url, "--labtasker-queue", queue]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            handle.read()  # a zombie is a survivor too: it was not reaped
            return True
    except OSError:
        return False


def running(pid: int) -> bool:
    """Alive and not a zombie (after kill -9 of a worker, its guardians are orphans that PID 1 may never reap)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def describe(pid: int) -> str:
    """Its parent, state and command line, read while it runs (a zombie's command line is empty)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state, ppid, pgrp = handle.read().rsplit(")", 1)[1].split()[:3]
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "gone"
    return f"state {state} parent {ppid} group {pgrp}: {argv[:200]}"


def status_of(log_dir: Path) -> dict:
    path = log_dir / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


SLOW_BATCH = {
    "suites": {"alpha": ["reach"]},
    "episodes_per_task": 4,
    "batch_size": 4,
    "max_steps": 40,
    "step_time_s": {"default": 0.15},
}
BATCH_LOG = Path("results/t/standin/logs/batches/alpha/reach/0000-4.log")


def start_submitter(url: str, queue: str, workdir: Path, log: Path) -> subprocess.Popen[bytes]:
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir, standin=SLOW_BATCH))
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *labtasker_args(url, queue, configfile),
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)


def wait_batch_running(workdir: Path) -> None:
    log = workdir / BATCH_LOG
    wait_for(lambda: log.exists() and "episode 0:" in log.read_text(), 180, "the batch to be running")


def test_kill_9_of_a_worker_kills_its_job_step_and_policy_server(labtasker_url, queue, workers, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    worker, _ = workers.start("doomed", gpus="0", allow=[workdir, REPO])
    submitter = start_submitter(labtasker_url, queue, workdir, tmp_path / "snakemake.log")
    try:
        wait_batch_running(workdir)
        doomed = descendants(worker.pid)
        assert len(doomed) >= 3
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        wait_for(lambda: not [pid for pid in doomed if running(pid)], 20, "the dead worker's processes to be gone")
    finally:
        submitter.kill()
        submitter.wait()


def test_sigterm_hands_the_batch_back_and_another_worker_finishes_it(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    first, first_logs = workers.start("first", gpus="0", allow=[workdir, REPO])
    submitter = start_submitter(labtasker_url, queue, workdir, tmp_path / "snakemake.log")
    try:
        wait_batch_running(workdir)
        (running_id,) = status_of(first_logs)["running"]
        doomed = {pid: describe(pid) for pid in descendants(first.pid)}
        assert len(doomed) >= 3  # job step guardian + job step + policy server (guardian + server)
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0
        survivors = [(doomed[pid], describe(pid)) for pid in doomed if alive(pid)]
        assert not survivors, f"processes of the stopped worker survived: {survivors}"
        task = client.get_task(running_id)
        assert (task.status, task.attempt) == ("pending", 0), "the task must be handed back uncharged"
        assert status_of(first_logs)["tasks"]["handed_back"] == 1
        output = workdir / "results" / "t" / "standin" / "batches" / "alpha" / "reach" / "0000-4.json"
        assert not output.exists()

        _, second_logs = workers.start("second", gpus="1", allow=[workdir, REPO])
        assert submitter.wait(240) == 0, (tmp_path / "snakemake.log").read_text()[-4000:]
    finally:
        if submitter.poll() is None:
            submitter.kill()
    result = json.loads(output.read_text())
    assert [e["index"] for e in result["episodes"]] == [0, 1, 2, 3]
    assert result["success_count"] == sum(e["success"] for e in result["episodes"])
    assert client.get_task(running_id).status == "succeeded"
    assert status_of(second_logs)["tasks"]["succeeded"] >= 1
    assert len(all_tasks(client)) == 2  # the manifest and the one batch


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
