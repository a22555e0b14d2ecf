"""The status command as a script sees it: exit codes, --watch termination, average row, failures, workers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO
from runkit import fabricate_run

from evalwf.report import run_state, status
from evalwf.rules.jobs import record_campaign

SECTION = {"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 4, "batch_size": 2}


def finished(tmp_path: Path, skip: set[str] | None = None):
    campaign = fabricate_run(tmp_path, lambda suite, task, index: index % 2 == 0, standin=SECTION, skip=skip)
    record_campaign(campaign.config, str(campaign.root / "campaign.yaml"))
    return campaign


def run_status(tmp_path: Path, campaign, *extra: str) -> int:
    return status.main([str(campaign.root), "--workdir", str(tmp_path), *extra])


def test_complete_run_exits_0_with_average_row(tmp_path, capsys):
    campaign = finished(tmp_path)
    assert run_status(tmp_path, campaign) == run_state.EXIT_COMPLETE
    out = capsys.readouterr().out
    assert "4/4 batches done" in out and "PARTIAL" not in out and "FAILED" not in out
    average = next(line for line in out.splitlines() if " average " in line)
    # two suites of 2/4 each: average of rates 50 %, equal suites so the pooled 4/8 interval applies
    assert average.split()[2:6] == ["4/8", "50.0", "21.5-78.5", "4/4"]


def test_missing_batch_without_queue_exits_1(tmp_path, capsys):
    campaign = finished(tmp_path, skip={"open/0002-2"})
    assert run_status(tmp_path, campaign) == run_state.EXIT_INCOMPLETE
    assert "3/4 batches done" in capsys.readouterr().out


def test_invalid_batch_exits_2_naming_file_and_reason(tmp_path, capsys):
    campaign = finished(tmp_path)
    bad = Path(campaign.task_plan("standin", "beta", "open").batches[1].path)
    record = json.loads(bad.read_text())
    record["success_count"] += 1  # the count no longer equals the sum of the episode flags
    bad.write_text(json.dumps(record))
    assert run_status(tmp_path, campaign) == run_state.EXIT_FAILED
    out = capsys.readouterr().out
    assert "1 FAILED" in out and "standin beta/open 0002-2: invalid:" in out and f"log: {bad}" in out


def test_watch_refreshes_while_running_and_ends_when_done(tmp_path, capsys, monkeypatch):
    campaign = finished(tmp_path, skip={"open/0002-2"})
    missing = campaign.task_plan("standin", "beta", "open").batches[1].path
    assert not Path(missing).exists()
    complete = fabricate_run(tmp_path / "later", lambda suite, task, index: index % 2 == 0, standin=SECTION)
    finished_file = complete.task_plan("standin", "beta", "open").batches[1].path
    calls = []

    def fake_queue(workdir, url, queue):
        calls.append(len(calls))
        if len(calls) == 3:  # the worker finishes the batch between the 2nd and 3rd refresh
            Path(missing).write_bytes(Path(finished_file).read_bytes())
        state = "pending" if len(calls) == 1 else "running"
        return {os.path.normpath(os.path.abspath(missing)): run_state.QueueTask(state=state, task_id="t_x", error="")}

    monkeypatch.setattr(status, "queue_states", fake_queue)
    assert run_status(tmp_path, campaign, "--watch", "0.01") == run_state.EXIT_COMPLETE
    assert len(calls) == 3, "two refreshes while pending/running, ends on the first settled one"
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("run t:")]
    assert headers == ["run t: 3/4 batches done - PARTIAL numbers"] * 2 + ["run t: 4/4 batches done"]


def test_watch_ends_after_a_failure_with_exit_2(tmp_path, capsys, monkeypatch):
    campaign = finished(tmp_path, skip={"open/0002-2"})
    missing = os.path.normpath(campaign.task_plan("standin", "beta", "open").batches[1].path)
    states = iter(["running", "failed", "failed"])

    def fake_queue(workdir, url, queue):
        state = next(states)
        error = "JobStepFailed: job step exited with status 1" if state == "failed" else ""
        return {missing: run_state.QueueTask(state=state, task_id="t_abcdefabcdef", error=error)}

    monkeypatch.setattr(status, "queue_states", fake_queue)
    assert run_status(tmp_path, campaign, "--watch", "0.01") == run_state.EXIT_FAILED
    out = capsys.readouterr().out
    assert out.count("batches done") == 2, "the failed batch is neither pending nor running: watching ends"
    assert "beta/open 0002-2: failed: JobStepFailed: job step exited with status 1" in out
    assert f"{tmp_path}/results/t/standin/logs/batches/beta/open/0002-2.log" in out
    assert f"{tmp_path}/.snakemake/labtasker/tasks/t_abcdefabcdef/" in out


def test_workers_from_status_files(tmp_path, capsys):
    campaign = finished(tmp_path)
    workers = tmp_path / ".snakemake" / "labtasker" / "workers"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    files = {
        "gpu0": {"pid": os.getpid(), "gpu": "0", "state": "running", "policy_server_state": "ready",
                 "running": {"t_aaaaaaaaaaaa": "evaluate_batch alpha/reach 0000-2"}, "tasks": {"succeeded": 3}},
        "gpu1": {"pid": os.getpid(), "gpu": "1", "state": "running", "policy_server_state": "dead",
                 "running": {"t_bbbbbbbbbbbb": "evaluate_batch beta/open 0002-2"}, "tasks": {}},
        "gpu2": {"pid": dead.pid, "gpu": "2", "state": "running", "running": {}, "tasks": {}},
        "gpu3": {"pid": os.getpid(), "gpu": "3", "state": "stopped", "running": {}, "tasks": {}},
    }  # fmt: skip
    for name, body in files.items():
        (workers / name).mkdir(parents=True)
        body.update(worker_id=f"{host}-{name}", host=host, updated_at="2026-01-01T00:00:00+00:00")
        (workers / name / "status.json").write_text(json.dumps(body))
    rows = {row["gpu"]: row for row in status.worker_rows(run_state.read_workers(tmp_path, history=True))}
    assert (rows["0"]["alive"], rows["0"]["activity"], rows["0"]["done"]) == ("yes", "running", 3)
    assert rows["0"]["current batch"] == "evaluate_batch alpha/reach 0000-2"
    assert (rows["1"]["alive"], rows["1"]["activity"]) == ("yes", "loading policy")
    assert (rows["2"]["alive"], rows["2"]["activity"]) == ("dead", "-")
    assert rows["3"]["alive"] == "stopped"
    assert run_status(tmp_path, campaign) == 0
    assert "workers:" in capsys.readouterr().out


@pytest.mark.parametrize("skip, code", [(None, 0), ({"open/0002-2"}, 1)])
def test_exit_status_of_the_command_line(tmp_path, skip, code):
    campaign = finished(tmp_path, skip=skip)
    completed = subprocess.run(
        [sys.executable, "-m", "evalwf.report.status", str(campaign.root), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert completed.returncode == code, completed.stderr
    assert completed.stderr == "", "nothing but the tables: no library chatter"


def test_a_cancelled_batch_is_shown_cancelled_with_its_own_exit_status(tmp_path, capsys, monkeypatch):
    """Cancelled by its submitter (Ctrl-C, SIGHUP, SIGTERM): resumable work, not a failure (exit 3, not 2); a task
    its policy's circuit breaker cancelled is a failure (its policy is broken)."""
    campaign = finished(tmp_path, skip={"open/0002-2"})
    missing = os.path.normpath(campaign.task_plan("standin", "beta", "open").batches[1].path)
    cancelled = run_state.QueueTask(state="cancelled", task_id="t_abcdefabcdef", error="", error_log=None)
    monkeypatch.setattr(status, "queue_states", lambda workdir, url, queue: {missing: cancelled})
    assert run_status(tmp_path, campaign) == run_state.EXIT_CANCELLED == 3
    out = capsys.readouterr().out
    assert "3/4 batches done, 1 cancelled (rerun the same snakemake command to resume)" in out, out
    assert "FAILED" not in out and "failed batches" not in out, out
    beta = next(line for line in out.splitlines() if line.split()[:2] == ["standin", "beta"])
    assert beta.split()[6:11] == ["0", "0", "0", "1", "partial"], out  # pending running failed cancelled status

    def task(result):
        return SimpleNamespace(status="cancelled", result=result)

    assert run_state.queue_state(task({})) == "cancelled"
    assert run_state.queue_state(task({"stopped_by": "policy circuit breaker", "reason": "x"})) == "failed"


@pytest.mark.parametrize("skip", [None, {"open/0002-2"}])
def test_a_queue_that_cannot_be_reached_is_never_exit_0(tmp_path, capsys, skip):
    """With every batch file complete, status exited 0 although the queue it was pointed at (a URL that
    does not answer here; an untrusted certificate or a wrong token the same way) could not be read."""
    campaign = finished(tmp_path, skip=skip)
    with socket.socket() as probe:  # a loopback port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = run_status(tmp_path, campaign, "--url", f"http://127.0.0.1:{port}")
    assert code == run_state.EXIT_QUEUE_UNREACHABLE == 4
    captured = capsys.readouterr()
    assert "not reachable" in captured.err and f"127.0.0.1:{port}" in captured.err, captured.err
    assert "batches done" in captured.out  # the files' view is still shown


def test_a_failure_the_files_show_still_exits_2_when_the_queue_cannot_be_reached(tmp_path, capsys, monkeypatch):
    campaign = finished(tmp_path)
    bad = Path(campaign.task_plan("standin", "beta", "open").batches[1].path)
    bad.write_text("{not json")

    def unreachable(workdir, url, queue):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(status, "queue_states", unreachable)
    assert run_status(tmp_path, campaign) == run_state.EXIT_FAILED
