"""A worker that reached its server through TLS, then meets a certificate it does not trust (the proxy was given a
certificate of another CA mid-campaign): its log said "claim failed (server unreachable?): The Labtasker Server could
not be reached"; it names the changed certificate and what to do. A real worker, the session's Labtasker server
behind a TLS proxy made here whose certificate can be replaced, real openssl certificates."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

from labtasker_testkit import REPO, Workers, labtasker_url, queue, wait_for
from tls_endpoint import signed_certificate, tls_endpoint
from tls_proxy import make_ca

from evalwf.queue.tls import CA_BUNDLE_ENV


def test_a_worker_names_a_certificate_replaced_mid_campaign(labtasker_url, queue, tmp_path):
    ca, ca_key = make_ca(tmp_path, "lab-ca")
    other_ca, other_key = make_ca(tmp_path, "another-ca")
    first = signed_certificate(tmp_path, ca, ca_key, "first")
    replacement = signed_certificate(tmp_path, other_ca, other_key, "new")
    with tls_endpoint(first, labtasker_url) as (url, replace):
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
