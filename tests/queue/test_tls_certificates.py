"""What a client says about a certificate that is trusted but wrong for the URL: a certificate with only
`CN=<ip>` and no subjectAltName IP entry was reported as "not trusted ... set SSL_CERT_FILE", the wrong fix; an
expired one the same way. Real certificates (openssl), a real TLS server on loopback, httpx as Labtasker's client
uses it."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
from conftest import missing_facts
from tls_endpoint import signed_certificate, tls_endpoint
from tls_proxy import make_ca

from evalwf.queue.tls import connection_problem


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
    with tls_endpoint(chain, "handshake") as (url, _), pytest.raises(httpx.ConnectError) as caught:
        httpx.get(url, verify=ssl.create_default_context(cafile=str(ca)), timeout=10)
    return caught.value, url


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


def test_a_certificate_replaced_mid_campaign_is_named_as_changed_not_as_a_server_away(certificates, tmp_path):
    """A long-running client (a worker, the submitter) that reached the server, then meets a certificate it does
    not trust (the proxy reloaded with a certificate of another CA) said only that the server could not be reached
    (Labtasker's own text); it names the change, and what to do."""
    other_ca, other_key = make_ca(tmp_path, "another-ca")
    replacement = signed_certificate(tmp_path, other_ca, other_key, "replacement", san="IP:127.0.0.1", days=2)
    verify = ssl.create_default_context(cafile=str(certificates["ca"]))
    with (
        tls_endpoint(certificates["good"], "answer-200") as (url, replace),
        httpx.Client(verify=verify, timeout=10) as client,
    ):
        assert client.get(url).status_code == 200  # connected: the campaign runs
        replace(replacement)
        with pytest.raises(httpx.ConnectError) as caught:
            client.get(url)
    message = connection_problem(caught.value, url, env={}, connected_before=True)
    assert not missing_facts(message, url, "changed since this client connected", "certificate", "restart"), message
    assert "could not be reached" not in message
    # a client that never connected is told about trust, as before
    assert "is not trusted" in connection_problem(caught.value, url, env={})
