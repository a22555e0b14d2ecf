"""`evalwf task <id>`, the command every failure prints, works as printed: in the workflow directory it finds the
embedded server itself (on its owner-only socket: no exported URL or token), and shows the task's state, attempts,
the cause of its error and its logs. A real embedded Labtasker server."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import missing_facts

from evalwf.contract.failure import failure_text
from evalwf.queue.embedded_server import ensure_embedded_server, stop_embedded_server


def test_evalwf_task_finds_the_embedded_server_and_shows_state_attempts_error_and_logs(tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    endpoint = ensure_embedded_server(workdir, log=lambda _: None)
    try:
        with endpoint.client("evalwf") as client:
            client.create_queue("evalwf")
            args = {"attempt": 3, "logs": [str(workdir / "results/t/logs/batch.log")]}
            task = client.submit_task(args, name="evaluate_batch[task=reach]", max_attempts=1)
            claim = client._claim(route="default", run_id="r_abcdefabcdef")
            message = failure_text("ValueError: bad shape", "node1:/wf/run.log", "job step exited with status 1")
            client._fail(
                task_id=task.id, run_id=claim.run_id, error_type="JobStepFailed", message=message, traceback=None
            )
        run_logs = workdir / ".snakemake" / "labtasker" / "tasks" / task.id
        run_logs.mkdir(parents=True)
        (run_logs / "r_abcdefabcdef.log").write_text("...")
        env = {k: v for k, v in os.environ.items() if k not in ("LABTASKER_URL", "LABTASKER_TOKEN", "LABTASKER_SOCKET")}

        def evalwf(*args):
            command = [sys.executable, "-m", "evalwf.cli.main", "task", *args]
            return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=60)

        shown = evalwf(task.id)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        lines = shown.stdout.splitlines()
        assert not missing_facts(lines[0], task.id, "evaluate_batch[task=reach]", "queue evalwf"), lines[0]
        state, attempts, error, log = lines[1:5]
        assert state.startswith("state:") and "failed" in state, state
        assert not missing_facts(attempts, "labtasker 1/1", "Snakemake attempt 3", "--retries"), attempts
        assert error.startswith("error:") and "ValueError: bad shape" in error, error
        assert log.startswith("full log:") and "node1:/wf/run.log" in log, log
        assert f"run logs here (oldest first): {run_logs / 'r_abcdefabcdef.log'}" in lines
        assert f"job log(s): {workdir / 'results/t/logs/batch.log'}" in lines
        missing = evalwf("t_nosuchtask00")
        assert missing.returncode == 1 and "no task t_nosuchtask00 in queue evalwf" in missing.stdout, missing
        assert evalwf("t_short").returncode == 1
    finally:
        stop_embedded_server(workdir / ".labtasker")
