"""The workers table of `python -m evalwf.report.status`: what each worker's policy server is doing, from the
status.json the worker writes (the real-worker versions: tests/plugin/test_visible_waiting.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import psutil

from evalwf.policy.spec import EXTERNAL_ENDPOINT, PolicySpec
from evalwf.report import run_state, status
from evalwf.worker.policy_server import GuardedPolicyServer
from evalwf.worker.shared_server import SharedPolicyServer

STARTED_AT = psutil.Process().create_time()  # this process's start, as a worker records its own


def write_workers(workdir, bodies):
    host = socket.gethostname()
    for name, body in bodies.items():
        directory = workdir / ".snakemake" / "labtasker" / "workers" / name
        directory.mkdir(parents=True)
        body = {"pid": os.getpid(), "gpu": name[-1], "state": "running", "tasks": {}, "running": {}, **body}
        body.update(worker_id=f"{host}-{name}", host=host, updated_at=datetime.now(UTC).isoformat())
        (directory / "status.json").write_text(json.dumps(body))


def test_policy_server_column_says_loading_since_external_ready_or_dead(tmp_path):
    since = datetime.now(UTC) - timedelta(minutes=7)
    batch = {"t_aaaaaaaaaaaa": "evaluate_batch alpha/reach 0000-2"}
    write_workers(
        tmp_path,
        {
            "gpu0": {"policy_server_state": "loading", "policy_server_loading_since": since.isoformat(),
                     "policy_server_loads": 0, "running": batch},
            "gpu1": {"policy_server_state": "external", "policy_identity": "p@1", "running": batch},
            "gpu2": {"policy_server_state": "ready", "policy_server_loads": 2, "policy_server_alive": True},
            "gpu3": {"policy_server_state": "none", "policy_server_loads": 0},
            "gpu4": {"policy_server_state": "dead", "policy_server_loads": 1, "running": batch},
        },
    )  # fmt: skip
    rows = {row["gpu"]: row for row in status.worker_rows(run_state.read_workers(tmp_path))}
    clock = since.astimezone().strftime("%H:%M:%S")
    assert rows["0"]["policy server"] == f"loading since {clock} (7min ago)"
    assert rows["0"]["activity"] == "loading policy"
    assert (rows["1"]["policy server"], rows["1"]["activity"]) == ("external", "running")
    assert (rows["2"]["policy server"], rows["2"]["activity"]) == ("ready (load #2)", "idle")
    assert rows["3"]["policy server"] == "-"
    assert (rows["4"]["policy server"], rows["4"]["activity"]) == ("dead", "loading policy")  # restarting it


def test_shared_server_state_loading_then_ready_and_external_without_loads(tmp_path):
    """SharedPolicyServer.state(), what the worker writes into status.json: "loading" with since, timeout and
    log while a server starts (a real stand-in server with a slow load), then "ready" with its loads; an
    external policy is "external", without loads or alive."""
    states = []
    server = GuardedPolicyServer(log_dir=tmp_path)
    shared = SharedPolicyServer(server)
    shared.on_change = lambda: states.append(shared.state())
    spec = PolicySpec.from_config(
        {"name": "slow", "command": "{python} -m benchmarks.standin.policy_server --port {port} --load-time-s 1",
         "startup_timeout_s": 60}
    )  # fmt: skip
    try:
        with shared.lease(spec, threading.Event()):
            pass
        loading = states[0]
        assert loading["policy_server_state"] == "loading" and loading["policy_identity"] == spec.identity
        assert loading["policy_server_timeout_s"] == 60 and "policy_server_alive" not in loading
        assert loading["policy_server_log"] == str(tmp_path / "policy-server-slow-1.log")
        assert datetime.fromisoformat(loading["policy_server_loading_since"]) <= datetime.now(UTC)
        assert (tmp_path / "policy-server-slow-1.log").exists()
        assert shared.state() == {
            "policy_server_state": "ready",
            "policy_identity": spec.identity,
            "policy_server_loads": 1,
            "policy_server_alive": True,
        }
        external = PolicySpec.from_config({"name": "p", "external": True, "checkpoint": "c"})
        with shared.lease(external, threading.Event()) as endpoint:
            assert endpoint == EXTERNAL_ENDPOINT
            assert shared.state() == {"policy_server_state": "external", "policy_identity": external.identity}
            assert server.alive(), "the worker's own server is left alone (no restart when its policy returns)"
    finally:
        server.stop()


def test_workers_table_lists_live_workers_and_the_history_only_when_asked(tmp_path):
    """Every worker ever started in a directory leaves its status.json: the table shows the ones that may still
    run (alive here, or on another host where their pid means nothing), and all of them with history (--all)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_workers(
        tmp_path,
        {
            "gpu0": {},  # this process: alive
            "gpu1": {"state": "stopped"},
            "gpu2": {"pid": int(gone.stdout)},  # exited without saying so: dead
            "gpu4": {"started_at": STARTED_AT - 3600},  # killed, its pid given to another process (this one): dead
            "gpu5": {"started_at": STARTED_AT},  # its pid, started when it did: alive
        },
    )
    remote = tmp_path / ".snakemake" / "labtasker" / "workers" / "elsewhere" / "status.json"
    remote.parent.mkdir(parents=True)
    body = {"worker_id": "node7-gpu3", "host": "node7", "pid": 1, "gpu": "3", "state": "running"}
    remote.write_text(json.dumps(body))
    live = {worker.worker: worker.alive for worker in run_state.read_workers(tmp_path)}
    host = socket.gethostname()
    assert live == {f"{host}-gpu0": "yes", f"{host}-gpu5": "yes", "node7-gpu3": "? (host node7)"}
    everyone = {worker.status["gpu"]: worker.alive for worker in run_state.read_workers(tmp_path, history=True)}
    assert everyone == {"0": "yes", "1": "stopped", "2": "dead", "3": "? (host node7)", "4": "dead", "5": "yes"}
