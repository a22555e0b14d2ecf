"""A worker that reached its server through TLS, then meets a certificate it does not trust (the proxy was given a
certificate of another CA mid-campaign): its log said "claim failed (server unreachable?): The Labtasker Server could
not be reached"; it names the changed certificate and what to do. A real worker, the session's Labtasker server
behind a TLS proxy made here whose certificate can be replaced, real openssl certificates."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from labtasker_testkit import REPO, Workers, labtasker_url, queue, wait_for
from tls_proxy import make_ca, openssl

from evalwf.queue.tls import CA_BUNDLE_ENV


def server_chain(directory: Path, ca: Path, ca_key: Path, name: str) -> Path:
    """A certificate for IP 127.0.0.1 that `ca` signed, with its key, in one PEM file."""
    key, request, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", request)
    extensions = directory / f"{name}.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
            "-extfile", extensions, "-out", cert)  # fmt: skip
    chain = directory / f"{name}.both"
    chain.write_text(cert.read_text() + key.read_text())
    return chain


@contextlib.contextmanager
def tls_proxy_to(upstream: str, chain: Path) -> Iterator[tuple[str, Callable[[Path], None]]]:
    """A TLS-terminating proxy on loopback in front of the http:// server `upstream`: its https:// URL, and a function
    that replaces its certificate and closes the open connections (as a proxy reloaded with a new one does with its
    idle keep-alive connections)."""
    target = urlsplit(upstream)
    contexts = [ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)]
    contexts[0].load_cert_chain(chain)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    open_connections: set[socket.socket] = set()

    def replace(new_chain: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(new_chain)
        contexts[0] = context
        for conn in list(open_connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def serve(conn: socket.socket) -> None:
        try:
            tls = contexts[0].wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        open_connections.add(tls)
        with tls, socket.create_connection((target.hostname, target.port)) as back:
            forth = threading.Thread(target=pump, args=(tls, back), daemon=True)
            forth.start()
            pump(back, tls)
            forth.join(30)
        open_connections.discard(tls)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.settimeout(30)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}", replace
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_a_worker_names_a_certificate_replaced_mid_campaign(labtasker_url, queue, tmp_path):
    ca, ca_key = make_ca(tmp_path, "lab-ca")
    other_ca, other_key = make_ca(tmp_path, "another-ca")
    first, replacement = server_chain(tmp_path, ca, ca_key, "first"), server_chain(tmp_path, other_ca, other_key, "new")
    with tls_proxy_to(labtasker_url, first) as (url, replace):
        pool = Workers(url, queue, tmp_path / "workers")
        try:
            _, log_dir = pool.start("w", allow=[tmp_path, REPO], env={CA_BUNDLE_ENV: str(ca)})
            out = log_dir / "worker.out"
            wait_for(lambda: "started: gpu 0" in out.read_text(), 60, "the worker to reach its server")
            replace(replacement)
            # the claim in flight when the connections closed may fail as any cut connection does; the next ones
            # meet the new certificate
            changed = f"the TLS certificate of {url} changed since this client connected"
            wait_for(lambda: changed in out.read_text(), 60, "a claim through the new certificate")
        finally:
            pool.stop_all()
    line = next(line for line in out.read_text().splitlines() if changed in line)
    assert "claim failed" in line and "restart the clients" in line, line
    assert "could not be reached" not in line and "unreachable" not in line, line
