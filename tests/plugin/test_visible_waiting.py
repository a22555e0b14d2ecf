"""Visible waiting, with a real Labtasker server, real workers and real snakemake runs: the
submitter warns when nothing is claimed and no worker is registered, its progress line shows manifest jobs and
counts a retried batch once, and a worker shows a loading policy server (or an external policy) in its log,
its status.json and `python -m evalwf.report.status`."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SNAKEFILE, standin_config, standin_server, write_config
from labtasker_testkit import (
    LABTASKER_PROFILE,
    REPO,
    Workers,
    all_tasks,
    client,
    labtasker_url,
    queue,
    wait_for,
    workers,
)

from evalwf.common.commands import evalwf_command
from snakemake_executor_plugin_labtasker import registered_workers

pytestmark = pytest.mark.slow
LOAD_S = 12  # the stand-in checkpoint load: long enough to be seen loading, in the log, file and status command


def submit(workdir: Path, configfile: Path, url: str, queue: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", url, "--labtasker-queue", queue,
        *extra,
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)


def status_command(workdir: Path) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "evalwf.report.status", "results/t", "--workdir", str(workdir)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return shown.stdout + shown.stderr


def worker_status(log_dir: Path) -> dict:
    try:
        return json.loads((log_dir / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def test_a_worker_is_registered_with_the_queue_while_it_runs(labtasker_url, queue, client, workers, tmp_path):
    assert registered_workers(client, "default") == 0
    process, _ = workers.start("w", allow=[tmp_path])
    wait_for(lambda: registered_workers(client, "default") == 1, 60, "the worker's registration")
    assert registered_workers(client, "other-route") == 0, "counted per route"
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    assert registered_workers(client, "default") == 0, "a worker that stops withdraws its registration"


def test_no_worker_warning_manifest_progress_and_a_retry_counted_once(labtasker_url, queue, client, workers, tmp_path):
    """Submitted with no worker: the progress line shows the manifest job waiting, and after a few seconds
    without a claim (--labtasker-no-worker-warning-s 3) and without a registered worker, a warning repeats
    the exact worker command. Then a worker starts; one batch fails once (stand-in fault raise_once) and
    --retries resubmits it: the last progress line says 2/2 batches, never 3."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    faults = [{"task": "reach", "episode": 2, "kind": "raise_once"}]
    section = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 4, "batch_size": 2, "faults": faults}
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir, standin=section))
    log = tmp_path / "submit.log"
    submitter = submit(workdir, configfile, labtasker_url, queue, log, "--labtasker-no-worker-warning-s", "3")
    try:
        command = evalwf_command("worker", "--gpus", "0", "--queue", queue, "--route", "default")
        warning = wait_for(
            lambda: next((line for line in log.read_text().splitlines() if "no worker is registered" in line), ""),
            120,
            "the no-worker warning",
        )
        assert "nothing claimed for" in warning and warning.endswith(command), warning
        text = log.read_text()
        assert (
            "[labtasker] progress: building 1 manifest(s), 0 running, 1 queued; "
            "batches are submitted once their manifests are sealed"
        ) in text, text[-3000:]
        assert all(t.status == "pending" for t in all_tasks(client))
        workers.start("w", allow=[workdir, REPO])
        assert submitter.wait(300) == 0, log.read_text()[-5000:]
    finally:
        if submitter.poll() is None:
            submitter.kill()
    text = log.read_text()
    assert "injected one-time simulator fault" in text or "JobStepFailed" in text, "the fault fired"
    lines = [line for line in text.splitlines() if "[labtasker] progress:" in line]
    assert "2/2 batches done, 0 running, 4/4 episodes" in lines[-1], lines
    assert not any("/3 batches" in line for line in lines), lines
    assert text.count("no worker is registered") == 1, "no warning once a worker runs"


def test_loading_policy_server_is_logged_and_shown(labtasker_url, queue, client, tmp_path):
    """A checkpoint that loads slowly: the worker logs what it starts (identity, timeout, log path), and its
    status.json and the status command say "loading since ..." while it loads, then "ready (load #1)"."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 2})
    config["policy"]["command"] += f" --load-time-s {LOAD_S}"
    configfile = write_config(workdir / "campaign.yaml", config)
    pool = Workers(labtasker_url, queue, workdir / ".snakemake" / "labtasker" / "workers")
    submitter = submit(workdir, configfile, labtasker_url, queue, tmp_path / "submit.log")
    try:
        _, log_dir = pool.start("w", allow=[workdir, REPO])
        loading = wait_for(
            lambda: (s := worker_status(log_dir)).get("policy_server_state") == "loading" and s, 120, "loading"
        )
        assert "policy_server_alive" not in loading and loading["policy_server_timeout_s"] == 60
        policy_log = loading["policy_server_log"]
        worker_out = (log_dir / "worker.out").read_text()
        started = f"starting policy server {loading['policy_identity']} (timeout 60s, log {policy_log})"
        assert started in worker_out, worker_out
        shown = status_command(workdir)
        assert "loading since " in shown and "loading policy" in shown, shown
        assert submitter.wait(300) == 0, (tmp_path / "submit.log").read_text()[-5000:]
        done = worker_status(log_dir)
        assert (done["policy_server_state"], done["policy_server_loads"]) == ("ready", 1), done
        assert Path(policy_log).exists()
        assert "ready (load #1)" in status_command(workdir)
    finally:
        if submitter.poll() is None:
            submitter.kill()
        pool.stop_all()


def test_external_policy_through_the_labtasker_profile_starts_no_server(labtasker_url, queue, client, tmp_path):
    """policy.url with a stand-in server started outside any worker, through profiles/labtasker: the worker
    leases no policy server (no "starting policy server", no "ready at external:..."), its status.json and
    the status command say "external" instead of loads / alive, and the campaign completes."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    pool = Workers(labtasker_url, queue, workdir / ".snakemake" / "labtasker" / "workers")
    with standin_server("--noise", "1.2") as url:
        config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 4})
        config["policy"] = {"name": "my-policy", "url": url, "checkpoint": "ckpt-7"}
        configfile = write_config(workdir / "campaign.yaml", config)
        submitter = submit(workdir, configfile, labtasker_url, queue, tmp_path / "submit.log")
        try:
            _, log_dir = pool.start("w", allow=[workdir, REPO])
            assert submitter.wait(300) == 0, (tmp_path / "submit.log").read_text()[-5000:]
            status = worker_status(log_dir)
            shown = status_command(workdir)
        finally:
            if submitter.poll() is None:
                submitter.kill()
            pool.stop_all()
    worker_out = (log_dir / "worker.out").read_text()
    assert "starting policy server" not in worker_out and "ready at external" not in worker_out, worker_out
    assert "is external (policy.url): no policy server to start" in worker_out, worker_out
    assert status["policy_server_state"] == "external", status
    assert "policy_server_loads" not in status and "policy_server_alive" not in status
    assert status["tasks"]["succeeded"] == 3  # the manifest and two batches
    assert "external" in shown and "ready (load" not in shown, shown
    batches = sorted((workdir / "results" / "t" / "standin" / "batches").rglob("*.json"))
    assert len(batches) == 2
