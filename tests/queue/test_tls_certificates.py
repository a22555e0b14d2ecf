"""What a client says about a certificate that is trusted but wrong for the URL: a certificate with only
`CN=<ip>` and no subjectAltName IP entry was reported as "not trusted ... set SSL_CERT_FILE", the wrong fix; an
expired one the same way. Real certificates (openssl), a real TLS server on loopback, httpx as Labtasker's client
uses it."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import missing_facts
from tls_proxy import make_ca, openssl

from evalwf.queue.tls import connection_problem


def signed_certificate(directory: Path, ca: Path, ca_key: Path, name: str, *, san: str | None, days: int) -> Path:
    """A server certificate the CA signed: CN=127.0.0.1, with `san` as its subjectAltName (None: none at all)."""
    key, request, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", request)
    extensions = directory / f"{name}.ext"
    extensions.write_text((f"subjectAltName={san}\n" if san else "") + "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", str(days),
            "-extfile", extensions, "-out", cert)  # fmt: skip
    cert.with_suffix(".both").write_text(cert.read_text() + key.read_text())
    return cert.with_suffix(".both")


def serve_tls(chain: Path) -> Iterator[int]:
    """A TLS endpoint on a kernel-chosen loopback port that completes handshakes (or fails them) and closes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("certs")
    ca, ca_key = make_ca(directory, "lab-ca")
    return {
        "ca": ca,
        "cn-only": signed_certificate(directory, ca, ca_key, "cn-only", san=None, days=2),
        "expired": signed_certificate(directory, ca, ca_key, "expired", san="IP:127.0.0.1", days=-1),
        "good": signed_certificate(directory, ca, ca_key, "good", san="IP:127.0.0.1", days=2),
    }


def connect_error(chain: Path, ca: Path) -> tuple[Exception, str]:
    for port in serve_tls(chain):
        url = f"https://127.0.0.1:{port}"
        with pytest.raises(httpx.ConnectError) as caught:
            httpx.get(url, verify=ssl.create_default_context(cafile=str(ca)), timeout=10)
        return caught.value, url
    raise AssertionError("unreachable")


def test_a_certificate_naming_the_ip_only_in_its_cn_names_the_subjectaltname_not_the_ca_bundle(certificates):
    error, url = connect_error(certificates["cn-only"], certificates["ca"])
    message = connection_problem(error, url, env={})
    assert url in message and "does not name the IP address" in message, message
    assert "subjectAltName=IP:" in message and "docs/cluster.md" in message, message
    assert "SSL_CERT_FILE" not in message, "the CA is trusted: pointing at the CA bundle is the wrong fix"


def test_an_expired_certificate_says_expired_and_reissue(certificates):
    error, url = connect_error(certificates["expired"], certificates["ca"])
    message = connection_problem(error, url, env={})
    assert url in message and "has expired" in message and "reissue" in message, message
    assert "SSL_CERT_FILE" not in message, message


@contextlib.contextmanager
def replaceable_tls(chain: Path) -> Iterator[tuple[int, Callable[[Path], None]]]:
    """A TLS endpoint on loopback answering every request with an empty 200, and a function that replaces its
    certificate (the next handshakes use the new one), as a proxy reloaded with a new certificate does."""
    contexts = [ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)]
    contexts[0].load_cert_chain(chain)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def replace(new_chain: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(new_chain)
        contexts[0] = context

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                with contexts[0].wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], replace
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_a_certificate_replaced_mid_campaign_is_named_as_changed_not_as_a_server_away(certificates, tmp_path):
    """A long-running client (a worker, the submitter) that reached the server, then meets a certificate it does
    not trust (the proxy reloaded with a certificate of another CA) said only that the server could not be reached
    (Labtasker's own text); it names the change, and what to do."""
    other_ca, other_key = make_ca(tmp_path, "another-ca")
    replacement = signed_certificate(tmp_path, other_ca, other_key, "replacement", san="IP:127.0.0.1", days=2)
    with replaceable_tls(certificates["good"]) as (port, replace):
        url = f"https://127.0.0.1:{port}"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(certificates["ca"])), timeout=10) as client:
            assert client.get(url).status_code == 200  # connected: the campaign runs
            replace(replacement)
            with pytest.raises(httpx.ConnectError) as caught:
                client.get(url)
    message = connection_problem(caught.value, url, env={}, connected_before=True)
    assert not missing_facts(message, url, "changed since this client connected", "certificate", "restart"), message
    assert "could not be reached" not in message
    # a client that never connected is told about trust, as before
    assert "is not trusted" in connection_problem(caught.value, url, env={})
