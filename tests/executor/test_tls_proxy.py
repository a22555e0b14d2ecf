"""TLS to a shared Labtasker server through a standard reverse proxy (nginx from Debian, scripts/nginx/labtasker.conf,
on loopback with a certificate of a CA made in the test): https:// URLs work in the executor plugin
(--labtasker-url), the worker (--url) and `evalwf status` with the CA named by SSL_CERT_FILE, and a missing or wrong
CA fails with a message naming that setting instead of "could not be reached"."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit / tls_proxy are used as parameters)
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SNAKEFILE, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, Workers, all_tasks, client, labtasker_url, queue
from tls_proxy import TlsProxy, tls_proxy

from evalwf.queue.tls import CA_BUNDLE_ENV, ca_bundle_problem, connection_problem


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
def test_https_campaign_through_the_reverse_proxy_completes(tls_proxy: TlsProxy, queue, client, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 4})
    configfile = write_config(workdir / "campaign.yaml", config)
    arguments = [*LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", tls_proxy.url,
                 "--labtasker-queue", queue]  # fmt: skip
    trusted = without_ca(**{CA_BUNDLE_ENV: str(tls_proxy.certs.ca)})

    # no CA bundle: the submitter stops before submitting anything, naming the setting
    refused = run_snakemake(workdir, *arguments, check=False, env=without_ca())
    assert refused.returncode != 0
    text = refused.stdout + refused.stderr
    assert "is not trusted" in text and f"set {CA_BUNDLE_ENV} to the PEM file" in text, text[-3000:]
    assert not all_tasks(client)

    workers = Workers(tls_proxy.url, queue, tmp_path / "workers")
    try:
        _, log_dir = workers.start("w", allow=[workdir, REPO], env=trusted)
        run_snakemake(workdir, *arguments, env=trusted)
    finally:
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
