"""Helpers and fixtures for the Labtasker executor tests (import them into a test module: no conftest.py here,
because the repository's tests import the top-level conftest by name).

Every test gets its own queue and working directory, so parallel test runs never share tasks or results.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# The tests' workflow directories are temporary; their Snakefile is the repository's, which their workers allow too
# (Workers.start(allow=[workdir, REPO])): the submitter is told so, or it refuses every task before creating it.
LABTASKER_PROFILE = ["--profile", str(REPO / "profiles" / "labtasker"), "--labtasker-allow-workflow", str(REPO)]
LOCAL_PROFILE = ["--profile", str(REPO / "profiles" / "local")]
DEAD_PROXY = {
    key: "http://127.0.0.1:9"
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
}


def start_url_server(root: Path, token: str, env: dict[str, str] | None = None, port: int | None = None) -> str:
    """A Labtasker server on a loopback port that requires `token`, as a shared server of a cluster is run (the
    embedded server listens on a Unix socket instead); stopped with stop_embedded_server(root)."""
    from evalwf.contract.loopback import free_port, with_loopback_no_proxy

    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    environment = dict(with_loopback_no_proxy({**os.environ, **(env or {})}))
    environment["LABTASKER_SERVER_TOKEN"] = token  # the server reads it from its environment, never from argv
    argv = [
        sys.executable, "-m", "labtasker_server", "serve", "--connection", "http", "--host", "127.0.0.1",
        "--port", str(port), "--labtasker-root", str(root), "--database-filesystem", "local", "--daemon",
    ]  # fmt: skip
    done = subprocess.run(
        argv, env=environment, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL, check=False
    )
    assert done.returncode == 0, done.stderr
    return f"http://127.0.0.1:{port}"


SHORT_LEASE_SERVER = (
    "import sys\n"
    "import labtasker_server.app as app\n"
    "import labtasker_server.services.tasks as tasks\n"
    "tasks.HEARTBEAT_TIMEOUT_US = int({lease} * 1_000_000)\n"
    "app.EXPIRY_SCAN_INTERVAL_SECONDS = {scan}\n"
    "from labtasker_server.cli import app as cli\n"
    "cli(sys.argv[1:])\n"
)


def start_short_lease_server(
    root: Path, port: int, lease_s: float, scan_s: float = 1
) -> tuple[subprocess.Popen[bytes], str]:
    """A real Labtasker 2.8 server (foreground, loopback, no token) whose lease and expiry scan are shortened, and
    its URL once it accepts connections; the caller stops the process.

    Labtasker 2.8 hard-codes both (labtasker_server.services.tasks.HEARTBEAT_TIMEOUT_US = 300 s,
    labtasker_server.app.EXPIRY_SCAN_INTERVAL_SECONDS = 60 s; no setting or environment variable), so this
    test server sets the two module constants before serving; the expiry code path is the server's own."""
    import socket

    root.mkdir(parents=True, exist_ok=True)
    code = SHORT_LEASE_SERVER.format(lease=lease_s, scan=scan_s)
    argv = [sys.executable, "-c", code, "serve", "--connection", "http", "--host", "127.0.0.1", "--port", str(port),
            "--labtasker-root", str(root), "--database-filesystem", "local"]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "LABTASKER_SERVER_TOKEN"}
    with open(root / "server.out", "ab") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment)

    def up() -> bool:
        assert server.poll() is None, (root / "server.out").read_text()
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(up, 60, "the short-lease Labtasker server")
    return server, f"http://127.0.0.1:{port}"


def kill_server(root: Path) -> None:
    """Kill a test's server outright: its database is thrown away, and `labtasker-server stop` waits out a 30 s
    graceful deadline while any client of the session (this process's included) still holds a connection."""
    from evalwf.queue.embedded_server import server_status

    pid = server_status(root).get("pid")
    if not isinstance(pid, int):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process_running(pid), 30, f"the killed Labtasker server (pid {pid}) to be gone")


def process_running(pid: int) -> bool:
    """Alive and not a zombie (a daemon's parent is PID 1, which may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="session")
def labtasker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("labtasker") / "server"
    token = secrets.token_urlsafe(32)
    url = start_url_server(root, token)
    # the server requires its token: every client of this session (and every subprocess: workers, snakemake with
    # --labtasker-url) reads it from LABTASKER_TOKEN, as on a cluster
    previous = os.environ.get("LABTASKER_TOKEN")
    os.environ["LABTASKER_TOKEN"] = token
    yield url
    kill_server(root)
    if previous is None:
        os.environ.pop("LABTASKER_TOKEN", None)
    else:
        os.environ["LABTASKER_TOKEN"] = previous


def embedded_client(workdir: Path, queue: str) -> Any:
    """A client of `queue` on the embedded server of `workdir`, found as every client finds it (its socket)."""
    from evalwf.queue.embedded_server import answering_endpoint, embedded_root

    endpoint = answering_endpoint(embedded_root(workdir, log=lambda _: None))
    assert endpoint is not None, f"no embedded server answers for {workdir}"
    return endpoint.client(queue)


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    digest = hashlib.sha256(f"{request.node.nodeid}-{os.getpid()}-{time.time()}".encode()).hexdigest()[:10]
    return f"test-{digest}"


@pytest.fixture
def client(labtasker_url: str, queue: str) -> Iterator[object]:
    from labtasker import Client

    with Client(url=labtasker_url, queue=queue) as c:
        c.create_queue(queue)
        yield c


def all_tasks(client: object) -> list[object]:
    tasks, cursor = [], None
    while True:
        page = client.list_tasks(limit=1000, cursor=cursor)  # type: ignore[attr-defined]
        tasks += page.items
        cursor = page.next_cursor
        if not cursor or not page.items:
            return tasks


class Workers:
    """Worker subprocesses started with `python -m evalwf.worker.main`; all stopped at teardown.

    url: the Labtasker server the workers are given with --url (None where every worker is `embedded`)."""

    def __init__(self, url: str | None, queue: str, base: Path):
        self.url, self.queue, self.base = url, queue, base
        self.processes: list[subprocess.Popen[bytes]] = []
        self.sessions: set[int] = set()  # pids of the processes started in a session of their own

    def start(
        self,
        name: str,
        *,
        gpus: str = "0",
        allow: list[Path],
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
        embedded: bool = False,
        session: bool = False,
        prefix: list[str] | None = None,
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """embedded: no --url, and no LABTASKER_URL / LABTASKER_SOCKET in its environment, so the worker finds (or
        starts) the embedded server of its first allowed dir. session: in a session (and process group) of its own,
        as from a terminal: a signal to its group reaches its children, and stop_all kills the group if it lingers.
        prefix: what runs the worker (`unshare ...`); the process returned is then the prefix's."""
        log_dir = self.base / name
        log_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            *(prefix or []), sys.executable, "-m", "evalwf.worker.main",
            "--gpus", gpus, "--queue", self.queue,
            "--log-dir", str(log_dir), "--poll-max", "0.5", "--heartbeat", "5",
        ]  # fmt: skip
        if not embedded:
            assert self.url, "a worker that is not embedded needs the server's URL"
            argv += ["--url", self.url]
        for directory in allow:
            argv += ["--allow-workflow", str(directory)]
        argv += extra or []
        environment = {**os.environ, **(env or {})}
        if embedded:
            environment.pop("LABTASKER_URL", None)
            environment.pop("LABTASKER_SOCKET", None)
        with open(log_dir / "worker.out", "ab") as out:
            process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                start_new_session=session,
            )
        self.processes.append(process)
        if session:
            self.sessions.add(process.pid)
        return process, log_dir

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                if process.pid in self.sessions:  # the whole group: what a prefix started too
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                else:
                    process.kill()
                process.wait()


@pytest.fixture
def workers(labtasker_url: str, queue: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(labtasker_url, queue, tmp_path / "workers")
    yield pool
    pool.stop_all()


def status_of(log_dir: Path) -> dict:
    """A worker's status.json (written atomically), {} before its first write."""
    path = log_dir / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def cmdlines() -> list[bytes]:
    """Every process's command line as `ps` shows it (/proc/<pid>/cmdline, NUL-separated), for the scans that a
    token never stands on one (tests/worker/test_trust.py, tests/plugin/test_multihost.py)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.append(Path(f"/proc/{entry}/cmdline").read_bytes())
            except OSError:
                pass
    return found


def job_step_runs(workdir: Path, task_id: str) -> int:
    """How often a task's job step ran: the worker writes one log per run, named after the claim's run id."""
    return len(list((workdir / ".snakemake" / "labtasker" / "tasks" / task_id).glob("*.log")))
