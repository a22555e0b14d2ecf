"""The submitter (executor plugin), a worker and `evalwf status` / `evalwf task` find the queue through one
function (evalwf.queue.resolver.resolve_queue): given the same flags, environment and workflow directory, they reach
the same endpoint with the same token (a real embedded server for the workflow-directory case)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from snakemake_interface_common.exceptions import WorkflowError

import snakemake_executor_plugin_labtasker as plugin
from evalwf.contract import CLIENT_SOCKET_ENV, CLIENT_TOKEN_ENV, CLIENT_TOKEN_FILE_ENV, CLIENT_URL_ENV
from evalwf.queue import loopback_owner, resolver
from evalwf.queue.embedded_server import RECORD_FILENAME, stop_embedded_server
from evalwf.queue.endpoint import QueueEndpoint
from evalwf.queue.tls import CA_BUNDLE_ENV, connection_problem
from evalwf.report import run_state
from evalwf.worker import main as worker_main
from snakemake_executor_plugin_labtasker import ExecutorSettings, submitter_queue

CLIENT_ENV = (CLIENT_URL_ENV, CLIENT_TOKEN_ENV, CLIENT_TOKEN_FILE_ENV, CLIENT_SOCKET_ENV, CA_BUNDLE_ENV)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which caller went through resolve_queue (each module's own reference to it), with no client variable set."""
    for name in CLIENT_ENV:
        monkeypatch.delenv(name, raising=False)
    seen: list[str] = []
    for caller in (plugin, worker_main, run_state):

        def spy(*args, _caller=caller.__name__, **kwargs):
            seen.append(_caller)
            return resolver.resolve_queue(*args, **kwargs)

        monkeypatch.setattr(caller, "resolve_queue", spy)
    return seen


def endpoints(workdir: Path, url: str | None = None) -> list[QueueEndpoint | None]:
    """The endpoint each of the three callers resolves for `workdir`, the flag `url` given to each as its own."""
    flag = ["--url", url] if url else []
    worker_options = worker_main.parse_args(["--allow-workflow", str(workdir), *flag])
    return [
        submitter_queue(ExecutorSettings(url=url), str(workdir), logging.getLogger("test")).endpoint,
        worker_main.worker_queue(worker_options).endpoint,
        run_state.status_queue(workdir, url),
    ]


def same_for_all(found: list[QueueEndpoint | None]) -> QueueEndpoint:
    first = found[0]
    assert first is not None and all(e == first and e.token == first.token for e in found), found  # type: ignore[union-attr]
    return first


def test_a_url_and_its_token_from_the_environment_or_the_flag(calls, tmp_path, monkeypatch):
    monkeypatch.setenv(CLIENT_URL_ENV, "https://gpu-head:8443")
    monkeypatch.setenv(CLIENT_TOKEN_ENV, "the-token")
    endpoint = same_for_all(endpoints(tmp_path))
    assert (endpoint.url, endpoint.token) == ("https://gpu-head:8443", "the-token")
    assert calls == ["snakemake_executor_plugin_labtasker", "evalwf.worker.main", "evalwf.report.run_state"]

    flagged = same_for_all(endpoints(tmp_path, url="http://127.0.0.1:9"))  # each one's own flag wins
    assert (flagged.url, flagged.token) == ("http://127.0.0.1:9", "the-token")
    assert not (tmp_path / ".labtasker").exists(), "a URL starts no embedded server"


def test_the_token_from_an_owner_only_file_for_every_client(calls, tmp_path, monkeypatch):
    """LABTASKER_TOKEN_FILE is read by the submitter, the workers and status alike (it was read only by the Slurm
    templates: exported as docs/cluster.md says, snakemake met "Authentication is required"); a file others can
    read, a missing or an empty one is refused naming the variable, the file and the fix; LABTASKER_TOKEN wins."""
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    token_file.chmod(0o600)
    monkeypatch.setenv(CLIENT_URL_ENV, "https://gpu-head:8443")
    monkeypatch.setenv(CLIENT_TOKEN_FILE_ENV, str(token_file))
    assert same_for_all(endpoints(tmp_path)).token == "file-token"
    assert len(calls) == 3
    monkeypatch.setenv(CLIENT_TOKEN_ENV, "env-token")
    assert same_for_all(endpoints(tmp_path)).token == "env-token"
    monkeypatch.delenv(CLIENT_TOKEN_ENV)

    token_file.chmod(0o644)
    with pytest.raises(resolver.QueueUnavailable) as readable:
        run_state.status_queue(tmp_path, None)
    assert all(fact in str(readable.value) for fact in (CLIENT_TOKEN_FILE_ENV, str(token_file), "chmod 600"))
    for problem, expected in (
        (lambda: token_file.unlink(), "cannot be read"),
        (lambda: token_file.write_text(""), "is empty"),
    ):
        problem()
        if token_file.exists():
            token_file.chmod(0o600)
        with pytest.raises(resolver.QueueUnavailable, match=expected):
            worker_main.worker_queue(worker_main.parse_args(["--allow-workflow", str(tmp_path)]))


def test_a_socket_from_the_environment(calls, tmp_path, monkeypatch):
    monkeypatch.setenv(CLIENT_SOCKET_ENV, str(tmp_path / "server.sock"))
    assert same_for_all(endpoints(tmp_path)) == QueueEndpoint(socket=str(tmp_path / "server.sock"))
    assert len(calls) == 3


def test_the_embedded_server_of_the_workflow_directory(calls, tmp_path):
    """Status only looks (no queue before one was started); the submitter or a worker starts it, then all three
    reach it on the same socket."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    assert run_state.status_queue(workdir, None) is None
    assert not (workdir / ".labtasker" / RECORD_FILENAME).exists(), "status started a server"
    try:
        endpoint = same_for_all(endpoints(workdir))
        assert endpoint.socket is not None and endpoint.url is None and endpoint.token is None
        assert calls.count("evalwf.report.run_state") == 2 and len(calls) == 4
    finally:
        stop_embedded_server(workdir / ".labtasker")
    with pytest.raises(resolver.QueueUnavailable, match="is not reachable"):  # started once, now stopped
        run_state.status_queue(workdir, None)


def test_a_url_off_loopback_without_a_token_is_warned_about_by_both_clients_that_start(calls, tmp_path):
    options = worker_main.parse_args(["--allow-workflow", str(tmp_path), "--url", "https://gpu-head:8443"])
    worker = worker_main.worker_queue(options)
    submitter = submitter_queue(ExecutorSettings(url="https://gpu-head:8443"), str(tmp_path), logging.getLogger())
    assert worker.warning == submitter.warning
    assert CLIENT_TOKEN_ENV in (worker.warning or "") and CLIENT_TOKEN_FILE_ENV in (worker.warning or "")
    on_loopback = submitter_queue(ExecutorSettings(url="http://127.0.0.1:9"), str(tmp_path), logging.getLogger())
    assert on_loopback.warning is None


def test_an_unreadable_ca_bundle_stops_every_client_before_it_connects(calls, tmp_path, monkeypatch):
    monkeypatch.setenv(CA_BUNDLE_ENV, str(tmp_path / "missing.pem"))
    with pytest.raises(resolver.QueueUnavailable, match="cannot be read as a CA bundle"):
        run_state.status_queue(tmp_path, None)
    options = worker_main.parse_args(["--allow-workflow", str(tmp_path)])
    with pytest.raises(resolver.QueueUnavailable, match="cannot be read as a CA bundle"):
        worker_main.worker_queue(options)
    with pytest.raises(WorkflowError, match=r"labtasker executor: .* cannot be read as a CA bundle") as raised:
        submitter_queue(ExecutorSettings(), str(tmp_path), logging.getLogger())
    from snakemake.exceptions import format_exception_to_string

    shown = format_exception_to_string(raised.value, {})  # how Snakemake prints it: the cause, and no frames
    assert "cannot be read as a CA bundle" in shown and 'File "' not in shown, shown
    assert len(calls) == 3
    assert not (tmp_path / ".labtasker").exists(), "nothing started"


# -- a token over plain http:// on loopback goes only to a port of our own user ------------------------------------

LISTENER = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True)\n"
    "c, _ = s.accept(); c.settimeout(5)\n"
    "try:\n    print(repr(c.recv(65536)), flush=True)\nexcept OSError as e:\n    print(repr(e), flush=True)\n"
)


def test_a_port_of_ours_passes_the_owner_check(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as connection:
            assert loopback_owner.accepting_uid(connection) == os.geteuid()
            loopback_owner.check_owner(connection, "here")
    assert loopback_owner.needs_owner_check("http://127.0.0.1:8080") and loopback_owner.needs_owner_check(
        "http://[::1]:1"
    )
    assert not loopback_owner.needs_owner_check("https://127.0.0.1:8443")
    assert not loopback_owner.needs_owner_check("http://node7:8080")
    # every client of such a URL that sends a token gets the check (Labtasker's httpx layout is where it goes)
    with QueueEndpoint(url="http://127.0.0.1:9", token="t").client("q") as guarded:
        assert type(guarded._http._transport._pool._network_backend).__name__ == "OwnerCheckedBackend"


@pytest.mark.skipif(not shutil.which("setpriv") or os.geteuid() != 0, reason="needs root to run as another user")
def test_a_token_is_never_sent_over_plain_http_to_a_loopback_port_of_another_user(monkeypatch):
    """Another local user holds the port of a loopback http:// URL (its server died): the client connects, finds the
    accepting socket is not its user's or root's, and closes the connection before a byte of the request is sent."""
    stranger = subprocess.Popen(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", LISTENER],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd="/", env={"PATH": "/usr/bin:/bin"}, text=True,
    )  # fmt: skip
    try:
        assert stranger.stdout is not None
        url = f"http://127.0.0.1:{int(stranger.stdout.readline())}"
        endpoint = QueueEndpoint(url=url, token="the-secret-token")
        with pytest.raises(Exception) as refused, endpoint.client("q") as client:
            client.create_queue("q")
        received = stranger.stdout.readline()
        assert received.strip() == "b''", f"the stranger was sent {received!r}"  # connected, then closed unread
        assert "is held by uid 65534, not by you" in connection_problem(refused.value, url), refused.value
    finally:
        stranger.kill()
        stranger.wait()
