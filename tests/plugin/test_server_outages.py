"""A Labtasker server that dies mid-campaign (real server, worker and snakemake processes).

- The embedded server killed with -9: the running submitter and worker bring it back on the same socket with the
  same database and finish the campaign, nothing lost or evaluated twice, nobody restarted by hand.
- A worker whose server is gone while it reports a finished batch still stops within seconds on SIGTERM; one
  whose server hangs stops within 5 s, and starts (or kills) no server.
- A completion report lost in an outage: the batch is adopted, not evaluated again.
"""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SNAKEFILE, standin_config, write_config
from labtasker_testkit import (
    LABTASKER_PROFILE,
    REPO,
    Workers,
    all_tasks,
    embedded_client,
    kill_server,
    labtasker_url,
    queue,
    start_short_lease_server,
    start_url_server,
    wait_for,
    workers,
)

from evalwf.contract.loopback import free_port

pytestmark = pytest.mark.slow


def slow_campaign(workdir: Path, tasks: list[str], episodes: int = 4, step_time_s: float = 0.1) -> Path:
    config = standin_config(
        workdir,
        standin={"suites": {"alpha": tasks}, "episodes_per_task": episodes, "batch_size": 2, "max_steps": 20,
                 "step_time_s": {"default": step_time_s}},
    )  # fmt: skip
    return write_config(workdir / "campaign.yaml", config)


def submitter(workdir: Path, configfile: Path, log: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), *extra,
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=env)


# The submitter of the lost-report test looks at the queue every second (the profile's 2 s is for real campaigns): the
# test waits for its rounds after the outage, and what it checks does not depend on how often it looks.
STATUS_EVERY_S = ("--seconds-between-status-checks", "1")


def job_step_runs(workdir: Path) -> dict[str, int]:
    tasks = workdir / ".snakemake" / "labtasker" / "tasks"
    return {d.name: len(list(d.glob("*.log"))) for d in tasks.iterdir()} if tasks.exists() else {}


def test_killed_embedded_server_comes_back_on_its_socket_and_the_campaign_finishes(queue, workers, tmp_path):
    from evalwf.queue.embedded_server import server_status, stop_embedded_server

    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = slow_campaign(workdir, ["reach", "push"])
    environment = {k: v for k, v in os.environ.items() if k != "LABTASKER_URL"}
    root = workdir / ".labtasker"
    try:
        workers.start("w", allow=[workdir, REPO], embedded=True)
        first = submitter(workdir, configfile, tmp_path / "submit.log", "--labtasker-queue", queue, env=environment)
        batches = workdir / "results" / "t" / "standin" / "batches"
        wait_for(lambda: len(list(batches.rglob("*.json"))) >= 1, 180, "a finished batch")
        before = server_status(root)
        os.kill(int(before["pid"]), signal.SIGKILL)

        assert first.wait(300) == 0, (tmp_path / "submit.log").read_text()[-4000:]
        status = server_status(root)
        assert status["state"] == "running" and status["pid"] != before["pid"], "the server was started again"
        assert status["socket"] == before["socket"], "on its socket"
        log = (tmp_path / "submit.log").read_text()
        assert len(list(batches.rglob("*.json"))) == 4
        runs = job_step_runs(workdir)
        with embedded_client(workdir, queue) as client:
            tasks = all_tasks(client)
        assert {t.status for t in tasks} == {"succeeded"} and len(tasks) == 6, log[-3000:]
        assert all(runs.get(t.id) == 1 for t in tasks), f"every job evaluated exactly once: {runs}"
    finally:
        workers.stop_all()
        stop_embedded_server(root)


def test_worker_stops_promptly_while_its_server_is_unreachable(queue, workers, tmp_path):
    from labtasker import Client

    from evalwf.queue.embedded_server import stop_embedded_server

    root = tmp_path / "server"
    token = {"LABTASKER_TOKEN": secrets.token_urlsafe(32)}  # a server given by URL: its token comes from the env
    url = start_url_server(root, token["LABTASKER_TOKEN"])
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = slow_campaign(workdir, ["reach"], episodes=2)
    first = None
    try:
        with Client(url=url, queue=queue, token=token["LABTASKER_TOKEN"]) as client:
            client.create_queue(queue)
        worker, log_dir = workers.start("w", allow=[workdir, REPO], extra=["--url", url], env=token)
        first = submitter(
            workdir,
            configfile,
            tmp_path / "submit.log",
            "--labtasker-url",
            url,
            "--labtasker-queue",
            queue,
            env={**os.environ, **token},
        )
        batch = workdir / "results" / "t" / "standin" / "batches" / "alpha" / "reach" / "0000-2.json"
        with Client(url=url, queue=queue, token=token["LABTASKER_TOKEN"]) as client:

            def batch_running() -> bool:
                return any(t.name.startswith("evaluate_batch") and t.status == "running" for t in all_tasks(client))

            wait_for(batch_running, 120, "the batch to run")
        stop_embedded_server(root)  # the server is gone while the batch runs
        wait_for(batch.exists, 120, "the batch to finish (its report then fails)")
        wait_for(lambda: "complete transport error" in (log_dir / "worker.out").read_text(), 30, "a failed report")
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        assert time.monotonic() - started < 12, "SIGTERM must stop a worker within seconds"
    finally:
        if first is not None:
            first.kill()
            first.wait()
        stop_embedded_server(root)


LEASE_S = 10


def test_a_completion_report_lost_in_an_outage_ends_with_the_batch_evaluated_once(queue, workers, tmp_path):
    """The server is down when a worker finishes a batch; the worker is stopped before it comes back, so its report
    is lost; the lease expires, the task fails (one attempt). The submitter does not let Snakemake delete the batch
    and retry it: it requeues the task naming the lost run, and the next worker adopts that run's result."""
    from labtasker import Client

    root = tmp_path / "server"
    server, url = start_short_lease_server(root, free_port(), LEASE_S)
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = slow_campaign(workdir, ["reach"], episodes=2, step_time_s=0.15)  # a batch takes 6 s or more
    batch = workdir / "results" / "t" / "standin" / "batches" / "alpha" / "reach" / "0000-2.json"
    options = dict(allow=[workdir, REPO], extra=["--heartbeat", "2"])
    pool = Workers(url, queue, tmp_path / "workers")
    run = None
    try:
        with Client(url=url, queue=queue) as client:
            client.create_queue(queue)
        first, first_log = pool.start("first", **options)
        log = tmp_path / "submit.log"
        run = submitter(workdir, configfile, log, "--labtasker-url", url, "--labtasker-queue", queue, *STATUS_EVERY_S)
        with Client(url=url, queue=queue) as client:

            def batch_step_running():
                return next((t for t in all_tasks(client) if t.name.startswith("evaluate_batch") and
                             (t.progress or {}).get("job_step") == "started"), None)  # fmt: skip

            task = wait_for(batch_step_running, 180, "the batch's job step to run")
        server.kill()  # the outage, while the batch is evaluated
        server.wait()
        wait_for(lambda: "complete transport error" in (first_log / "worker.out").read_text(), 120, "a failed report")
        written = batch.read_bytes()  # the job step has ended: what it wrote
        first.send_signal(signal.SIGTERM)  # ... and its worker stops before the server is back: the report is lost
        assert first.wait(60) == 0
        assert "giving up reporting complete" in (first_log / "worker.out").read_text()

        server, _ = start_short_lease_server(root, int(url.rsplit(":", 1)[1]), LEASE_S)  # back, same port
        _, second_log = pool.start("second", **options)
        assert run.wait(240) == 0, log.read_text()[-5000:]
        text = log.read_text()
        assert f"task {task.id}: its lease expired after its outputs were written" in text, text[-4000:]
        assert f"task {task.id}: adopted the result of its run" in (second_log / "worker.out").read_text()
        with Client(url=url, queue=queue) as client:
            final = client.get_task(task.id)
        assert final.status == "succeeded" and final.result.get("adopted_run"), final
        assert job_step_runs(workdir)[task.id] == 1, "the batch was evaluated again"
        assert batch.read_bytes() == written, "the batch was evaluated again"  # (snakemake touches it: same bytes)
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        pool.stop_all()
        server.kill()
        server.wait()


def test_sigterm_while_the_embedded_server_hangs_stops_the_worker_within_5_s_and_starts_nothing(
    queue, workers, tmp_path
):
    """The server is stopped (SIGSTOP: it accepts and never answers) while a batch runs: a stopped worker hands back
    what it can for a few seconds and exits, whatever its requests to the server still wait for; it neither kills nor
    restarts the server."""
    from evalwf.queue.embedded_server import server_status, stop_embedded_server

    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = slow_campaign(workdir, ["reach"], episodes=4)
    environment = {k: v for k, v in os.environ.items() if k not in ("LABTASKER_URL", "LABTASKER_TOKEN")}
    root = workdir / ".labtasker"
    run = None
    pid = None
    try:
        worker, log_dir = workers.start("w", allow=[workdir, REPO], embedded=True)
        wait_for(lambda: "started: gpu" in (log_dir / "worker.out").read_text(), 120, "the worker")
        run = submitter(workdir, configfile, tmp_path / "submit.log", "--labtasker-queue", queue, env=environment)
        with embedded_client(workdir, queue) as client:

            def batch_step_running() -> bool:
                return any(
                    t.name.startswith("evaluate_batch") and (t.progress or {}).get("job_step") == "started"
                    for t in all_tasks(client)
                )

            wait_for(batch_step_running, 180, "a batch's job step to run")
        pid = int(server_status(root)["pid"])
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.5)  # its heartbeats and claims now wait on the server
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        took = time.monotonic() - started
        text = (log_dir / "worker.out").read_text()
        assert took < 5.0, f"SIGTERM under a hanging server took {took:.1f}s:\n{text[-3000:]}"
        assert "embedded server started" not in text.split("SIGTERM", 1)[1], "the stop path started a server"
        os.kill(pid, signal.SIGCONT)
        assert int(server_status(root)["pid"]) == pid, "the hanging server was killed"
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        if run is not None:
            run.kill()
            run.wait()
        workers.stop_all()
        stop_embedded_server(root)


PORT_SQUATTER = r"""
import json, socket, sys, time
port = int(sys.argv[1])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
deadline = time.monotonic() + 30
while True:
    try:
        listener.bind(("127.0.0.1", port))
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
listener.listen(64)
print(json.dumps({"listening": port}), flush=True)
while True:
    connection, _ = listener.accept()
    connection.settimeout(2)
    try:
        data = connection.recv(65536)
    except OSError:
        data = b""
    print(json.dumps({"received": data.decode("latin-1")}), flush=True)
    if data:
        connection.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    connection.close()
"""


@pytest.mark.skipif(not shutil.which("setpriv") or os.geteuid() != 0, reason="needs root to run as another user")
def test_a_stranger_on_the_released_port_of_a_plain_http_server_gets_no_token(queue, workers, tmp_path):
    """A shared server on a loopback port (plain http, with a token) is killed mid-campaign and another local user
    takes its port at once. The worker and the submitter connect to it, see that the port is not their user's (nor
    root's) and send nothing; when the real server returns on the same port and database, the campaign finishes."""
    from evalwf.queue.embedded_server import stop_embedded_server
    from evalwf.queue.endpoint import QueueEndpoint

    root, port = tmp_path / "server", free_port()
    token = {"LABTASKER_TOKEN": secrets.token_urlsafe(32)}
    url = start_url_server(root, token["LABTASKER_TOKEN"], port=port)
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = slow_campaign(workdir, ["reach"], episodes=2, step_time_s=0.05)
    endpoint = QueueEndpoint(url=url, token=token["LABTASKER_TOKEN"])
    squatter = first = None
    try:
        with endpoint.client(queue) as client:
            client.create_queue(queue)
        worker, log_dir = workers.start("w", allow=[workdir, REPO], extra=["--url", url], env=token)
        first = submitter(workdir, configfile, tmp_path / "submit.log", "--labtasker-url", url, "--labtasker-queue",
                          queue, env={**os.environ, **token})  # fmt: skip
        with endpoint.client(queue) as client:
            wait_for(lambda: all_tasks(client), 120, "the submitter's tasks")
        kill_server(root)
        squatter = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", PORT_SQUATTER,
             str(port)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd="/", env={"PATH": "/usr/bin:/bin"},
            text=True,
        )  # fmt: skip
        assert squatter.stdout is not None
        assert json.loads(squatter.stdout.readline()) == {"listening": port}
        received = [json.loads(squatter.stdout.readline())["received"] for _ in range(3)]  # three connections
        assert received == ["", "", ""], f"the stranger was sent {received}"
        squatter.kill()
        squatter.wait()
        start_url_server(root, token["LABTASKER_TOKEN"], port=port)  # the real server returns, same database
        assert first.wait(240) == 0, (tmp_path / "submit.log").read_text()[-4000:]
        assert worker.poll() is None, (log_dir / "worker.out").read_text()[-3000:]
        with endpoint.client(queue) as client:
            assert {t.status for t in all_tasks(client)} == {"succeeded"}
    finally:
        for process in (first, squatter):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        stop_embedded_server(root)
