"""A shared Labtasker server behind a TLS reverse proxy, as a lab runs one: the server on a Unix socket in an
owner-only directory (scripts/nginx/serve-on-socket.sh), Debian's nginx with scripts/nginx/labtasker.conf as
shipped (only its EDIT values replaced) terminating TLS on loopback with a certificate signed by a CA made here with
openssl, and checking the session's token (LABTASKER_TOKEN, set by labtasker_url). Import the fixture into a test
module, with labtasker_url.

nginx is a test prerequisite (`make test` installs it): missing under CI=true fails, elsewhere it skips.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from labtasker_testkit import REPO

from evalwf.contract.loopback import free_port

SITE_CONF = REPO / "scripts" / "nginx" / "labtasker.conf"
SERVE_ON_SOCKET = REPO / "scripts" / "nginx" / "serve-on-socket.sh"
# what the shipped file holds on its EDIT lines -> what the test puts there
EDIT_VALUES = (
    "include /etc/nginx/labtasker-token.map;",
    "server unix:/run/labtasker/server.sock;",
    "listen 8443 ssl;",
    "/etc/ssl/labtasker/server.pem",
    "/etc/ssl/labtasker/server.key",
)
MAIN_CONF = """daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {site};
}}
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if found:
        return found
    message = "nginx is not installed (`make test` installs it: bash scripts/apt_install.sh test-tools nginx openssl)"
    if os.environ.get("CI") == "true":  # CI installs everything itself: never skip the TLS tests silently there
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def openssl(*args: str | Path) -> None:
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"openssl {' '.join(map(str, args))}: {done.stderr}"


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", key, "-out", cert)  # fmt: skip
    return cert, key


@dataclass(frozen=True)
class Certificates:
    ca: Path  # what signed the proxy's certificate
    other_ca: Path  # a CA that did not
    server: Path
    server_key: Path


def make_certificates(directory: Path) -> Certificates:
    """A CA, a server certificate it signed for IP 127.0.0.1 only (so https://localhost is a hostname mismatch),
    and an unrelated CA."""
    ca, ca_key = make_ca(directory, "evalwf-test-ca")
    other_ca, _ = make_ca(directory, "some-other-ca")
    server, server_key, request = directory / "server.pem", directory / "server.key", directory / "server.csr"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=labtasker proxy", "-keyout", server_key,
            "-out", request)  # fmt: skip
    extensions = directory / "server.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
            "-extfile", extensions, "-out", server)  # fmt: skip
    return Certificates(ca=ca, other_ca=other_ca, server=server, server_key=server_key)


def render_site(upstream: Path, port: int, certs: Certificates, token_map: Path) -> str:
    text = SITE_CONF.read_text()
    values = (f"include {token_map};", f"server unix:{upstream};", f"listen 127.0.0.1:{port} ssl;", str(certs.server),
              str(certs.server_key))  # fmt: skip
    for old, new in zip(EDIT_VALUES, values, strict=True):
        assert text.count(old) == 1, f"{SITE_CONF} no longer holds exactly one {old!r} (update EDIT_VALUES)"
        text = text.replace(old, new)
    return text


def serve_on_socket(upstream: Path, root: Path) -> None:
    """(Re)start the shared server on `upstream` as the recipe does."""
    env = {**os.environ, "LABTASKER_SERVER": str(Path(sys.executable).parent / "labtasker-server")}
    done = subprocess.run(["bash", str(SERVE_ON_SOCKET), str(upstream), str(root)], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass(frozen=True)
class TlsProxy:
    url: str  # https://127.0.0.1:<port>
    certs: Certificates
    access_log: Path
    upstream: Path  # the shared server's Unix socket, nginx's upstream
    server_root: Path

    def client(self, queue: str) -> object:
        """A client of the shared server on its socket, behind the proxy (no token: it is the server's side)."""
        from labtasker import Client

        return Client(socket=str(self.upstream), queue=queue)


def _answers_tls(port: int, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def tls_proxy(labtasker_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsProxy]:
    from evalwf.queue.embedded_server import stop_embedded_server

    nginx = nginx_binary()
    directory = tmp_path_factory.mktemp("tls-proxy")
    certs = make_certificates(directory)
    # a short path (a Unix socket's is at most 107 bytes), writable by its owner alone; nginx runs as the test's user
    sockets = Path(tempfile.mkdtemp(prefix="evalwf-lt-", dir="/tmp"))
    os.chmod(sockets, 0o750)
    upstream, server_root = sockets / "server.sock", directory / "server"
    serve_on_socket(upstream, server_root)
    token_map = directory / "labtasker-token.map"
    token = os.environ["LABTASKER_TOKEN"]
    token_map.write_text(f'"Bearer {token}" 1;\n')
    token_map.chmod(0o600)
    port = free_port()
    site = directory / "labtasker.conf"
    site.write_text(render_site(upstream, port, certs, token_map))
    main = directory / "nginx.conf"
    main.write_text(MAIN_CONF.format(d=directory, site=site))
    error_log = directory / "error.log"
    with open(directory / "nginx.out", "wb") as out:
        process = subprocess.Popen(
            [nginx, "-e", str(error_log), "-p", str(directory), "-c", str(main)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while not _answers_tls(port, certs.ca):
            if process.poll() is not None or time.monotonic() > deadline:
                logs = (directory / "nginx.out").read_text() + (error_log.read_text() if error_log.exists() else "")
                pytest.fail(f"nginx did not serve TLS on 127.0.0.1:{port}:\n{logs}", pytrace=False)
            time.sleep(0.1)
        yield TlsProxy(f"https://127.0.0.1:{port}", certs, directory / "access.log", upstream, server_root)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        stop_embedded_server(server_root)
        shutil.rmtree(sockets, ignore_errors=True)
