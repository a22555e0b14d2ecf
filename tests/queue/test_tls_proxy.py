"""TLS to a shared Labtasker server through a standard reverse proxy (nginx from Debian, scripts/nginx/labtasker.conf,
on loopback with a certificate of a CA made in the test): https:// URLs work in the executor plugin
(--labtasker-url), the worker (--url) and `evalwf status` with the CA named by SSL_CERT_FILE, and a missing or wrong
CA fails with a message naming that setting instead of "could not be reached"."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit / tls_proxy are used as parameters)
from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import SNAKEFILE, SNAKEMAKE, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, Workers, all_tasks, kill_server, labtasker_url, queue, wait_for
from tls_proxy import TlsProxy, serve_on_socket, tls_proxy

from evalwf.queue.embedded_server import server_status
from evalwf.queue.tls import CA_BUNDLE_ENV, ca_bundle_problem, connection_problem

NOBODY = 65534


def without_ca(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (CA_BUNDLE_ENV, "SSL_CERT_DIR")}
    env.update(extra)
    return env


def run_worker(url: str, queue: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "evalwf.worker.main", "--gpus", "0", "--url", url, "--queue", queue,
               "--allow-workflow", str(tmp_path), "--log-dir", str(tmp_path / "worker"),
               "--idle-timeout", "1"]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def status(run_dir: Path, workdir: Path, url: str, queue: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "evalwf.cli.main", "status", str(run_dir), "--workdir", str(workdir),
               "--url", url, "--queue", queue]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_https_campaign_through_the_reverse_proxy_completes(tls_proxy: TlsProxy, queue, tmp_path):
    """... also when its server dies mid-campaign and a squatter takes the upstream (no token reaches it)."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 4})
    configfile = write_config(workdir / "campaign.yaml", config)
    arguments = [*LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", tls_proxy.url,
                 "--labtasker-queue", queue]  # fmt: skip
    trusted = without_ca(**{CA_BUNDLE_ENV: str(tls_proxy.certs.ca)})
    client = tls_proxy.client(queue)  # closed with the module's server
    client.create_queue(queue)

    # no CA bundle: the submitter stops before submitting anything, naming the setting
    refused = run_snakemake(workdir, *arguments, check=False, env=without_ca())
    assert refused.returncode != 0
    text = refused.stdout + refused.stderr
    assert "is not trusted" in text and f"set {CA_BUNDLE_ENV} to the PEM file" in text, text[-3000:]
    assert not all_tasks(client)

    workers = Workers(tls_proxy.url, queue, tmp_path / "workers")
    submitter = None
    try:
        worker, log_dir = workers.start("w", allow=[workdir, REPO], env=trusted)
        command = [*SNAKEMAKE, "--snakefile", str(SNAKEFILE), "--directory", str(workdir), *arguments]
        with open(tmp_path / "submit.log", "wb") as out:
            submitter = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=trusted)
        wait_for(lambda: all_tasks(client), 120, "the submitter's tasks")
        # mid-campaign the server dies and a squatter takes its socket: no token reaches it; the server returns
        squat_while_the_server_is_down(tls_proxy)
        assert worker.poll() is None, (log_dir / "worker.out").read_text()[-3000:]
        assert submitter.wait(240) == 0, (tmp_path / "submit.log").read_text()[-4000:]  # the campaign recovers
    finally:
        if submitter is not None and submitter.poll() is None:
            submitter.kill()
            submitter.wait()
        workers.stop_all()
    tasks = all_tasks(client)
    assert tasks and {t.status for t in tasks} == {"succeeded"}
    assert f"server {tls_proxy.url}" in (log_dir / "worker.out").read_text()
    served = tls_proxy.access_log.read_text()
    assert "/api/v2/" in served and " 200 " in served  # the clients' requests went through the proxy
    assert os.environ["LABTASKER_TOKEN"] not in served

    run_dir = Path(config["results_dir"]) / config["run"]
    shown = status(run_dir, workdir, tls_proxy.url, queue, trusted)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "not reachable" not in shown.stderr and "no Labtasker queue found" not in shown.stdout, shown.stdout
    wrong = status(run_dir, workdir, tls_proxy.url, queue, without_ca(**{CA_BUNDLE_ENV: str(tls_proxy.certs.other_ca)}))
    assert "is not trusted" in wrong.stderr and f"now {CA_BUNDLE_ENV}={tls_proxy.certs.other_ca}" in wrong.stderr


def test_the_proxy_checks_the_token_and_forwards_none(tls_proxy: TlsProxy, queue):
    """The server behind the proxy listens on a socket and checks no token: nginx refuses a request without the
    right one (401, Labtasker's own error) and removes it from those it forwards."""
    import httpx

    url = f"{tls_proxy.url}/api/v2/queues"
    verify = ssl.create_default_context(cafile=str(tls_proxy.certs.ca))
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        refused = httpx.get(url, headers=headers, verify=verify, timeout=30)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized", refused.text
    token = {"Authorization": f"Bearer {os.environ['LABTASKER_TOKEN']}"}
    assert httpx.get(url, headers=token, verify=verify, timeout=30).status_code == 200


@pytest.mark.parametrize("ca", ["unset", "other"])
def test_worker_refuses_an_untrusted_certificate_naming_the_ca_setting(tls_proxy: TlsProxy, queue, tmp_path, ca):
    env = without_ca() if ca == "unset" else without_ca(**{CA_BUNDLE_ENV: str(tls_proxy.certs.other_ca)})
    done = run_worker(tls_proxy.url, queue, tmp_path, env)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert f"cannot reach the Labtasker server {tls_proxy.url}: the TLS certificate" in output
    assert "is not trusted" in output and f"set {CA_BUNDLE_ENV} to the PEM file of the CA that signed it" in output
    assert ("is not set" in output) if ca == "unset" else (str(tls_proxy.certs.other_ca) in output)


def test_worker_with_the_ca_bundle_reaches_the_queue_over_https(tls_proxy: TlsProxy, queue, tmp_path):
    done = run_worker(tls_proxy.url, queue, tmp_path, without_ca(**{CA_BUNDLE_ENV: str(tls_proxy.certs.ca)}))
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "idle for" in output, output  # started, found nothing to do, exited


def test_a_ca_bundle_file_that_cannot_be_read_is_named(tls_proxy: TlsProxy, queue, tmp_path):
    missing = tmp_path / "no-such-ca.pem"
    done = run_worker(tls_proxy.url, queue, tmp_path, without_ca(**{CA_BUNDLE_ENV: str(missing)}))
    assert done.returncode == 2
    expected = f"{CA_BUNDLE_ENV}={missing} cannot be read as a CA bundle (No such file or directory)"
    assert expected in done.stdout + done.stderr
    not_pem = tmp_path / "not-a-ca.pem"
    not_pem.write_text("not a certificate\n")
    assert "cannot be read as a CA bundle" in (ca_bundle_problem({CA_BUNDLE_ENV: str(not_pem)}) or "")
    assert ca_bundle_problem({CA_BUNDLE_ENV: str(tls_proxy.certs.ca)}) is None and ca_bundle_problem({}) is None


def _connect_error(url: str, monkeypatch: pytest.MonkeyPatch, ca: Path | None) -> Exception:
    from labtasker import Client

    if ca is None:
        monkeypatch.delenv(CA_BUNDLE_ENV, raising=False)
    else:
        monkeypatch.setenv(CA_BUNDLE_ENV, str(ca))
    with pytest.raises(Exception) as caught, Client(url=url, queue="q") as labtasker:
        labtasker.create_queue("q")
    return caught.value


def test_connection_problem_says_what_is_wrong_with_tls(tls_proxy: TlsProxy, labtasker_url, monkeypatch):
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    port = tls_proxy.url.rsplit(":", 1)[1]
    # the certificate names 127.0.0.1 only: trusted, but not for this host name
    mismatch = _connect_error(f"https://localhost:{port}", monkeypatch, tls_proxy.certs.ca)
    assert str(mismatch) == "The Labtasker Server could not be reached."  # what a user saw before
    assert "does not name the host of that URL" in connection_problem(mismatch, f"https://localhost:{port}")
    # https:// to the Labtasker server itself, which speaks plain HTTP
    plain = labtasker_url.replace("http://", "https://")
    wrong_scheme = _connect_error(plain, monkeypatch, tls_proxy.certs.ca)
    assert "a Labtasker server itself speaks plain http://" in connection_problem(wrong_scheme, plain)
    # anything else keeps its own text
    assert connection_problem(ValueError("boom"), plain, env={}) == "boom"


# -- a squatter takes the shared server's place behind the proxy -----------------------------------------------------

SOCKET_SQUATTER = r"""
import http.server, json, os, socketserver, sys

class Fake(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        print(json.dumps({"path": self.path, "headers": dict(self.headers.items())}), flush=True)
        # read the body: nginx keeps its upstream connections alive, and an unread body would be taken for the
        # start of the next request on that connection (a worker's claim body before "GET" gave 501, not 503)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

    def log_message(self, *args):
        pass

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

path = sys.argv[1]
try:
    if os.path.lexists(path):
        os.unlink(path)  # the dead server's socket file stays behind
    server = Server(path, Fake)
except OSError as error:
    print(json.dumps({"refused": str(error)}), flush=True)
    sys.exit(0)
print(json.dumps({"listening": path}), flush=True)
server.serve_forever()
"""


class SocketSquatter:
    """A fake server that takes the released upstream socket (run as `user`: None for the test's own), recording
    every request's headers; it answers 503."""

    def __init__(self, path: Path, user: int | None = None) -> None:
        prefix = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        self.process = subprocess.Popen(
            [*prefix, "/usr/bin/python3", "-c", SOCKET_SQUATTER, str(path)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
        assert self.process.stdout is not None
        self.started = json.loads(self.process.stdout.readline())
        self.requests: list[dict[str, object]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.requests.append(json.loads(line))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def squat_while_the_server_is_down(tls_proxy: TlsProxy) -> None:
    """The shared server behind nginx dies while its clients keep calling through the proxy. Another local user
    cannot take its socket (the directory is not theirs); a process that does get there (the server's own user) is
    sent requests, the test's own with the token among them, but never the token: nginx checked it and removed it.
    Then the real server returns on the same socket and database."""
    import httpx

    token = os.environ["LABTASKER_TOKEN"]
    verify = ssl.create_default_context(cafile=str(tls_proxy.certs.ca))
    squatters: list[SocketSquatter] = []
    kill_server(tls_proxy.server_root)
    try:
        if os.geteuid() == 0 and shutil.which("setpriv"):
            stranger = SocketSquatter(tls_proxy.upstream, user=NOBODY)
            squatters.append(stranger)
            assert "Permission denied" in str(stranger.started.get("refused")), stranger.started
        squatter = SocketSquatter(tls_proxy.upstream)
        squatters.append(squatter)
        assert squatter.started == {"listening": str(tls_proxy.upstream)}
        for _ in range(2):
            answer = httpx.get(f"{tls_proxy.url}/api/v2/queues", headers={"Authorization": f"Bearer {token}"},
                               verify=verify, timeout=30)  # fmt: skip
            assert answer.status_code == 503, answer.text  # the squatter's answer, through nginx
        wait_for(lambda: len(squatter.requests) >= 3, 30, "a worker's request to reach the squatter through nginx")
        sent = json.dumps(squatter.requests)
        assert token not in sent and "authorization" not in sent.lower(), squatter.requests
    finally:
        for fake in squatters:
            fake.stop()
        with contextlib.suppress(OSError):
            tls_proxy.upstream.unlink()
        serve_on_socket(tls_proxy.upstream, tls_proxy.server_root)
