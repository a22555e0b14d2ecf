"""A TLS endpoint made here on loopback, whose certificate can be replaced mid-test (as a proxy reloaded with a new
certificate does), and the certificates it serves: what the TLS message tests of the queue client and of a real worker
share. Serving: complete the handshake and close, answer every request with an empty 200, or relay to an http://
upstream (a Labtasker server)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from tls_proxy import openssl

Serving = Literal["handshake", "answer-200"] | str  # or the http:// URL to relay to


def signed_certificate(directory: Path, ca: Path, ca_key: Path, name: str, *, san: str | None = "IP:127.0.0.1",
                       days: int = 2) -> Path:  # fmt: skip
    """A server certificate `ca` signed, CN=127.0.0.1 with `san` as its subjectAltName (None: none at all), and its
    key, in one PEM file."""
    key, request, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", request)
    extensions = directory / f"{name}.ext"
    extensions.write_text((f"subjectAltName={san}\n" if san else "") + "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", str(days),
            "-extfile", extensions, "-out", cert)  # fmt: skip
    chain = cert.with_suffix(".both")
    chain.write_text(cert.read_text() + key.read_text())
    return chain


def _server_context(chain: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    return context


class _Certificate:
    """The certificate being served and the connections made with it. Replacing it closes those connections, and a
    handshake that began with the old one and ended after the replacement is closed too, so no client keeps a
    connection through the old certificate (a keep-alive connection kept that way would never meet the new one)."""

    def __init__(self, chain: Path) -> None:
        self.context = _server_context(chain)
        self.lock = threading.Lock()
        self.connections: set[ssl.SSLSocket] = set()

    def replace(self, chain: Path) -> None:
        context = _server_context(chain)
        with self.lock:
            self.context = context
            stale, self.connections = list(self.connections), set()
        for conn in stale:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def admit(self, tls: ssl.SSLSocket, context: ssl.SSLContext) -> bool:
        """Track a connection whose handshake used `context`; False (and it is closed) if that is no longer served."""
        with self.lock:
            if context is self.context:
                self.connections.add(tls)
                return True
        with contextlib.suppress(OSError):
            tls.shutdown(socket.SHUT_RDWR)
        return False

    def forget(self, tls: ssl.SSLSocket) -> None:
        with self.lock:
            self.connections.discard(tls)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _relay(tls: ssl.SSLSocket, upstream: str) -> None:
    target = urlsplit(upstream)
    with socket.create_connection((target.hostname, target.port)) as back:
        forth = threading.Thread(target=_pump, args=(tls, back), daemon=True)
        forth.start()
        _pump(back, tls)
        forth.join(30)


def _serve(conn: socket.socket, certificate: _Certificate, serving: Serving) -> None:
    context = certificate.context
    try:
        tls = context.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError):
        conn.close()
        return
    with tls:
        if serving == "handshake" or not certificate.admit(tls, context):
            return
        try:
            if serving == "answer-200":
                tls.recv(65536)
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            else:
                _relay(tls, serving)
        except OSError:
            pass
        finally:
            certificate.forget(tls)


@contextlib.contextmanager
def tls_endpoint(chain: Path, serving: Serving) -> Iterator[tuple[str, Callable[[Path], None]]]:
    """An https:// URL on a kernel-chosen loopback port serving `chain`, and a function that replaces the certificate
    (the connections made with the old one are closed, as a reloaded proxy closes its idle keep-alive connections)."""
    certificate = _Certificate(chain)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.settimeout(30)
            threading.Thread(target=_serve, args=(conn, certificate, serving), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}", certificate.replace
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
