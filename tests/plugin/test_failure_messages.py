"""The first line a user reads about a failed batch is its cause, the exception's own type and text, then where
the full log is: in the submitter's output, in `evalwf status` and in `evalwf task <id>`, the command every failure
prints (it finds the queue itself, as status does). A real campaign: a policy answering actions of the
wrong dimension, the batch evaluated by a real worker in the benchmark's own interpreter (as LIBERO's is), where
the shape error used to stay behind "JobStepFailed ... its output is above in this log" and traceback frames."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, all_tasks, client, labtasker_url, queue, workers

pytestmark = pytest.mark.slow
CAUSE = "ValueError: stand-in simulator needs actions of at least 4 values, got 2"


def evalwf(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalwf.cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_a_shape_error_is_the_first_line_of_every_failure_report(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    section = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2, "python": sys.executable}
    config = standin_config(workdir, standin=section)
    config["policy"]["command"] += " --action-dim 2"  # the stand-in simulator needs at least 4
    configfile = write_config(workdir / "campaign.yaml", config)
    workers.start("w", allow=[workdir, REPO])
    done = run_snakemake(
        workdir, *LABTASKER_PROFILE, "--retries", "0", "--configfile", str(configfile),
        "--labtasker-url", labtasker_url, "--labtasker-queue", queue, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0
    # Snakemake's error block: "message: " and the failure report, whose first line is the cause
    report = output[output.index("Error in rule evaluate_batch") :]
    first = re.search(r"message: (.*)", report).group(1)
    assert first == CAUSE, report[:2000]
    full_log = re.search(rf"Full log: {socket.gethostname()}:(\S+)", report).group(1)
    assert CAUSE in Path(full_log).read_text()  # the worker's log of that run, on this host
    (batch,) = [t for t in all_tasks(client) if t.name.startswith("evaluate_batch")]

    # evalwf status: the failed batch's line names the cause, the next one that log
    status = evalwf("status", "results/t", "--url", labtasker_url, "--queue", queue, cwd=workdir)
    assert status.returncode == 2, status.stdout + status.stderr
    shown = status.stdout.split("alpha/reach 0000-2: failed: ", 1)[1].splitlines()
    assert shown[0] == CAUSE and shown[1].startswith(f"    log: {socket.gethostname()}:{full_log}"), status.stdout

    # the hint, run as printed (in a shell that is not in the workflow directory, with the environment the
    # submitter had: here the URL and token of the test server, given with --url and $LABTASKER_TOKEN)
    (hint,) = re.findall(r"Inspect: (.*)", report)
    assert shlex.split(hint)[1:3] == ["task", batch.id], hint
    task = subprocess.run(shlex.split(hint), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert task.returncode == 0, task.stdout + task.stderr
    lines = task.stdout.splitlines()
    assert lines[0].startswith(f"task {batch.id}  evaluate_batch[") and f"(queue {queue})" in lines[0]
    assert "state: failed" in lines and f"error: {CAUSE}" in lines, task.stdout
    assert any(line.startswith("attempts: labtasker 1/1") for line in lines), task.stdout
    assert f"full log: {socket.gethostname()}:{full_log}" in lines, task.stdout

    # `make clean` removes the queue and the workers' run logs: the cause is still shown, from the failure record
    # the worker wrote under results/ (status and task are run without --url: no queue is found)
    shutil.rmtree(workdir / ".snakemake")
    status = evalwf("status", "results/t", cwd=workdir)
    assert status.returncode == 2, status.stdout + status.stderr
    shown = status.stdout.split("alpha/reach 0000-2: failed: ", 1)[1].splitlines()
    assert shown[0] == CAUSE and f"recorded: task {batch.id}, labtasker 1/1" in shown[2], status.stdout
    assert "1 FAILED" in status.stdout
    task = evalwf("task", batch.id, cwd=workdir)
    assert task.returncode == 0, task.stdout + task.stderr
    assert f"error: {CAUSE}" in task.stdout and "attempts: labtasker 1/1" in task.stdout, task.stdout
    tail = task.stdout.split("the log's last lines:\n", 1)[1]
    assert CAUSE in tail, task.stdout
