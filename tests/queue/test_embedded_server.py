"""The embedded Labtasker server (real servers, workers, snakemake and a real second user): it listens on a Unix
socket only its owner can reach, so a stranger who takes over a port gets nothing; it is found by its socket, never
by a record a stranger could have written; a server that holds its root is never killed on a guess (a missing
record, a hang), nor used when it holds its root on TCP."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import SNAKEFILE, standin_config, write_config
from labtasker_testkit import (
    LABTASKER_PROFILE,
    REPO,
    Workers,
    embedded_client,
    process_running,
    queue,
    start_url_server,
    wait_for,
)

from evalwf.queue.embedded_server import (
    MAX_SOCKET_PATH,
    EmbeddedServerError,
    _stop_if_socket_lost,
    answering_endpoint,
    embedded_socket_path,
    ensure_embedded_server,
    not_answering,
    server_status,
    stop_embedded_server,
)

NOBODY = 65534
RECORD = "embedded.json"


def tcp_listeners(pid: int) -> list[object]:
    return [c for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


SECRETS = ("LABTASKER_TOKEN", "LABTASKER_SERVER_TOKEN", "HF_TOKEN", "GITHUB_TOKEN", "my_token_value")


@pytest.fixture
def embedded(tmp_path, monkeypatch):
    """A workflow directory and its embedded server (stopped at the end), started by a client that holds tokens of
    every kind in its environment, as a submitter or a worker of a shared server would."""
    for name in SECRETS:
        monkeypatch.setenv(name, f"secret-{name}")
    monkeypatch.setenv("LABTASKER_TOKEN_FILE", str(tmp_path / "token"))
    workdir = tmp_path / "wf"
    workdir.mkdir()
    yield workdir, ensure_embedded_server(workdir, log=lambda _: None)
    stop_embedded_server(workdir / ".labtasker")


def test_the_embedded_server_listens_on_an_owner_only_socket_and_on_no_port(embedded):
    workdir, endpoint = embedded
    root = workdir / ".labtasker"
    assert endpoint.socket == str(root / "server.sock") and endpoint.url is None
    info = os.lstat(endpoint.socket)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert tcp_listeners(int(server_status(root)["pid"])) == [], "the embedded server must not listen on TCP"
    assert not (root / "token").exists(), "no token exists that could be sent anywhere"
    # a daemon outlives its caller: a token in its environment could be read from it for as long as it runs
    environ = Path(f"/proc/{server_status(root)['pid']}/environ").read_bytes().split(b"\0")
    assert any(v.startswith(b"PATH=") for v in environ), "the server's environment was not read"
    assert [v for v in environ if b"TOKEN" in v.split(b"=", 1)[0].upper() or b"secret-" in v] == []
    assert json.loads((root / RECORD).read_text())["socket"] == endpoint.socket
    with endpoint.client("q") as client:
        client.create_queue("q")


def test_a_missing_record_or_a_hang_never_kills_the_embedded_server(embedded):
    """`labtasker-server status` prints no `authentication_enabled`: a check of it killed a healthy server
    whenever its record was gone, and after a hang."""
    workdir, endpoint = embedded
    root = workdir / ".labtasker"
    pid = int(server_status(root)["pid"])
    (root / RECORD).unlink()
    assert ensure_embedded_server(workdir, log=lambda _: None) == endpoint
    assert int(server_status(root)["pid"]) == pid, "a server whose record was missing was restarted"
    assert json.loads((root / RECORD).read_text())["socket"] == endpoint.socket, "the record was not written again"
    os.kill(pid, signal.SIGSTOP)
    try:
        said: list[str] = []
        assert ensure_embedded_server(workdir, log=said.append) == endpoint
        assert "keeping it" in " ".join(said), said
    finally:
        os.kill(pid, signal.SIGCONT)
    assert psutil.pid_exists(pid) and answering_endpoint(root) == endpoint
    assert int(server_status(root)["pid"]) == pid, "a hung server was killed"


def test_a_removed_socket_restarts_the_server_on_the_same_socket_and_database(embedded, queue):
    """A tmp cleaner (or `rm -rf .labtasker/*`) removed the socket of a running server: no client could reach it
    again. The next client stops it and starts it on the same socket and database, saying so in one line."""
    workdir, endpoint = embedded
    root = workdir / ".labtasker"
    with endpoint.client(queue) as client:
        client.create_queue(queue)
        task = client.submit_task({"k": 1}, name="kept")
    pid = int(server_status(root)["pid"])
    os.unlink(endpoint.socket)
    told = not_answering(root)  # a client that only looks (`status`) says what happened and what fixes it
    assert f"(pid {pid}) runs, but its socket {endpoint.socket} is gone" in told, told
    assert f"stop --labtasker-root {root.resolve()}`" in told, told
    said: list[str] = []
    assert ensure_embedded_server(workdir, log=said.append) == endpoint
    assert len(said) == 1 and f"(pid {pid}) had lost its socket {endpoint.socket}" in said[0], said
    assert "restarted it on the same socket and database" in said[0]
    assert not psutil.pid_exists(pid) or not process_running(pid), "the server without a socket still runs"
    assert int(server_status(root)["pid"]) != pid and stat.S_ISSOCK(os.lstat(endpoint.socket).st_mode)
    with endpoint.client(queue) as client:
        assert client.get_task(task.id).status == "pending", "the queue was lost"


def test_a_lost_socket_that_cannot_be_restarted_here_names_the_socket_and_the_command(tmp_path):
    """The process holding the root is not seen listening from here (another PID namespace, another user): nothing
    is killed on a guess, and the one line names the missing socket and the command that fixes it."""
    root, path = tmp_path / ".labtasker", tmp_path / ".labtasker" / "server.sock"
    status = {"state": "unhealthy", "connection": "socket", "socket": str(path), "pid": os.getpid()}
    with pytest.raises(EmbeddedServerError) as refused:
        _stop_if_socket_lost(status, root, path, dict(os.environ))
    message = str(refused.value)
    assert f"its socket {path} is gone" in message and f"stop --labtasker-root {root}`" in message, message
    assert "\n" not in message
    assert _stop_if_socket_lost({**status, "state": "starting"}, root, path, {}) is None, "a start was cut short"


def test_a_server_holding_the_root_on_tcp_is_refused_with_the_command_that_stops_it(tmp_path):
    """Any local user could reach a TCP port: such a server of the root is neither used nor killed on a guess."""
    workdir = tmp_path / "wf"
    root = workdir / ".labtasker"
    url = start_url_server(root, "a-token")
    try:
        with pytest.raises(EmbeddedServerError) as refused:
            ensure_embedded_server(workdir, log=lambda _: None)
        port = url.rsplit(":", 1)[1]
        assert f"listens on TCP port {port}, not on {embedded_socket_path(root)}" in str(refused.value)
        assert f"labtasker-server stop --labtasker-root {root.resolve()}" in str(refused.value)
        assert server_status(root)["connection"] == "http", "the server was left alone"
    finally:
        stop_embedded_server(root)


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary directory, short: pytest's own (longer for another user, and per xdist worker) can leave too
    little room for a socket under it."""
    directory = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_root_too_long_for_a_socket_listens_in_an_owner_only_directory(tmp_path, short_tmp):
    root = tmp_path / ("r" * (MAX_SOCKET_PATH - len(str(tmp_path)))) / ".labtasker"
    path = embedded_socket_path(root)
    assert path.parent == short_tmp / f"evalwf-{os.getuid()}" and len(str(path)) <= MAX_SOCKET_PATH
    try:
        endpoint = ensure_embedded_server(tmp_path, root=root, log=lambda _: None)
        assert endpoint.socket == str(path) and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        stop_embedded_server(root)
    # a stranger who made that directory first (here: its owner changed) cannot place a socket of theirs for us
    if os.geteuid() == 0:
        os.chown(path.parent, NOBODY, NOBODY)
        expected = f"belongs to uid {NOBODY}"
    else:
        path.parent.chmod(0o777)
        expected = "is writable by other users"
    with pytest.raises(EmbeddedServerError, match=expected):
        ensure_embedded_server(tmp_path, root=root, log=lambda _: None)


# -- a stranger takes over the port that the embedded server's record names ----------------------------------------

SQUATTER = r"""
import http.server, json, sys

class Fake(http.server.BaseHTTPRequestHandler):
    def answer(self):
        print(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization")}), flush=True)
        ok = self.path.endswith("/health")
        body = json.dumps({"status": "ok", "api_version": "2", "database": "ok"} if ok else {"detail": "no"})
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Squatter:
    """A fake Labtasker server run as another user (nobody): /health answers, everything else is 401, and every
    request it receives is recorded (with its Authorization header)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c", SQUATTER],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.requests: list[dict[str, str | None]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.requests.append(json.loads(line))

    def tokens(self) -> list[str]:
        return [r["authorization"] for r in self.requests if r["authorization"]]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("setpriv") or os.geteuid() != 0, reason="needs root to run as another user")
def test_a_stranger_on_the_recorded_port_gets_nothing_from_the_worker_the_submitter_or_status(queue, tmp_path):
    """The embedded server died; another local user now holds the port its record names, answering /health with 200
    and everything else with 401. Neither a worker, nor the next snakemake, nor `status` sends it anything: they
    find (and start again) the server on its socket, and the campaign finishes."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    section = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2, "max_steps": 20}
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir, standin=section))
    root = workdir / ".labtasker"
    ensure_embedded_server(workdir, log=lambda _: None)
    os.kill(int(server_status(root)["pid"]), signal.SIGKILL)  # the server dies ...
    squatter = Squatter()  # ... and a stranger takes the port that a record names
    (root / RECORD).write_text(json.dumps({"url": f"http://127.0.0.1:{squatter.port}", "port": squatter.port}))
    env = {k: v for k, v in os.environ.items() if k not in ("LABTASKER_URL", "LABTASKER_SOCKET", "LABTASKER_TOKEN")}
    pool = Workers(None, queue, tmp_path / "workers")
    try:
        worker, log_dir = pool.start("w", allow=[workdir, REPO], embedded=True, env=env)
        worker_log = log_dir / "worker.out"
        wait_for(lambda: "started: gpu" in worker_log.read_text() or worker.poll() is not None, 120, "the worker")
        assert squatter.tokens() == [], "the worker sent its token to a stranger"
        assert worker.poll() is None, worker_log.read_text()[-3000:]

        submit = [
            sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
            *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-queue", queue,
        ]  # fmt: skip
        done = subprocess.run(submit, cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
        assert squatter.tokens() == [], "the submitter sent its token to a stranger"
        assert done.returncode == 0, done.stderr[-4000:]

        status = [sys.executable, "-m", "evalwf.report.status", str(workdir / "results" / "t"), "--queue", queue]
        shown = subprocess.run(status, cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        assert squatter.tokens() == [], "status sent its token to a stranger"
        assert shown.returncode == 0 and "not reachable" not in shown.stderr, shown.stdout + shown.stderr
        assert squatter.requests == [], f"a client talked to the stranger: {squatter.requests}"
        with embedded_client(workdir, queue) as client:
            assert {t.status for t in client.list_tasks(limit=100).items} == {"succeeded"}
    finally:
        pool.stop_all()
        squatter.stop()
        stop_embedded_server(root)
