"""TLS to a shared Labtasker server behind a reverse proxy (docs/cluster.md): which CA bundle the clients trust, and
what a client says when the server's certificate is not trusted.

A Labtasker server speaks plain HTTP; on a network it sits behind a TLS reverse proxy and clients use an https://
URL. Labtasker's client (httpx) verifies the proxy's certificate against the PEM file named by SSL_CERT_FILE, else
certifi's bundle, and so does every other client here (submitter, workers, `evalwf status`): that one variable is
the CA bundle setting. Without the hint below, a distrusted certificate only reads "The Labtasker Server could not
be reached" and a missing bundle file "[Errno 2] No such file or directory", neither naming the file or the fix.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator, Mapping

from evalwf.queue.loopback_owner import NOT_OURS

CA_BUNDLE_ENV = "SSL_CERT_FILE"
HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH
IP_ADDRESS_MISMATCH = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH: an IP URL checks subjectAltName IP entries only, never CN
CERT_HAS_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED
CERTIFICATE_RECIPE = "docs/cluster.md, 'A certificate for the proxy'"


def _bundle_state(env: Mapping[str, str]) -> str:
    path = env.get(CA_BUNDLE_ENV)
    return f"now {CA_BUNDLE_ENV}={path}" if path else f"{CA_BUNDLE_ENV} is not set: only the default bundle is trusted"


def ca_bundle_problem(env: Mapping[str, str] = os.environ) -> str | None:
    """Why the CA bundle setting cannot be used at all (None when it can, or is not set). Checked for any URL:
    Labtasker's client loads the bundle when it is created, also for http:// URLs."""
    path = env.get(CA_BUNDLE_ENV)
    if not path:
        return None
    try:
        ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return (
            f"{CA_BUNDLE_ENV}={path} cannot be read as a CA bundle ({reason}): set {CA_BUNDLE_ENV} to a PEM file of "
            "trusted CA certificates (for an https:// Labtasker URL, one holding the CA that signed the server's "
            f"certificate), or unset it to use the default bundle"
        )
    return None


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def connection_problem(
    error: BaseException, url: str | None, env: Mapping[str, str] = os.environ, *, connected_before: bool = False
) -> str:
    """What to tell the user about a failed connection to the Labtasker server at `url`: for a TLS failure, what is
    wrong and which setting fixes it; otherwise the error's own text. `connected_before`: this client reached the
    server earlier (a worker or submitter mid-campaign), so a certificate it now refuses is not the one it accepted."""
    return tls_problem(error, url, env, connected_before=connected_before) or str(error)


def tls_problem(
    error: BaseException, url: str | None, env: Mapping[str, str] = os.environ, *, connected_before: bool = False
) -> str | None:
    """What is wrong with the TLS (or the CA bundle, or another user's loopback port) behind a failed connection, and
    how to fix it; None when the failure is something else (a server down, a refused connection)."""
    bundle = ca_bundle_problem(env)
    if bundle is not None:
        return bundle
    for cause in _causes(error):
        if NOT_OURS in str(cause):  # a loopback port of another user's: its own text says what to do
            return str(cause)
        if isinstance(cause, ssl.SSLCertVerificationError):
            if connected_before and cause.verify_code != CERT_HAS_EXPIRED:
                return _certificate_changed(cause, url, env)
            return _certificate_problem(cause, url, env)
        if isinstance(cause, ssl.SSLError):
            return (
                f"the TLS handshake with {url} failed ({cause.reason or cause}): an https:// URL must name a TLS "
                "endpoint (the reverse proxy); a Labtasker server itself speaks plain http://"
            )
    return None


def _certificate_changed(cause: ssl.SSLCertVerificationError, url: str | None, env: Mapping[str, str]) -> str:
    """A client that reached the server before now refuses its certificate: the proxy's certificate was replaced
    (or the URL's address now leads elsewhere). Without this it read as the server being unreachable."""
    return (
        f"the TLS certificate of {url} changed since this client connected, and the new one is refused "
        f"({cause.verify_message or cause}): if the proxy's certificate was replaced on purpose, give it one signed "
        f"by a CA the clients trust ({_bundle_state(env)}; {CERTIFICATE_RECIPE}), or add its CA to that bundle and "
        "restart the clients (they read it when they start); otherwise something else now answers at that address"
    )


def _certificate_problem(cause: ssl.SSLCertVerificationError, url: str | None, env: Mapping[str, str]) -> str:
    detail = cause.verify_message or str(cause)
    if cause.verify_code == IP_ADDRESS_MISMATCH:
        return (
            f"the TLS certificate of {url} does not name the IP address of that URL in its subjectAltName "
            f"({detail}; for an IP address a certificate's CN is never read): reissue it with "
            f"subjectAltName=IP:<that address> ({CERTIFICATE_RECIPE}), or use a host name it names"
        )
    if cause.verify_code == CERT_HAS_EXPIRED:
        return (
            f"the TLS certificate of {url} has expired ({detail}): reissue it ({CERTIFICATE_RECIPE}) and "
            "reload the proxy; the clients need no change"
        )
    if cause.verify_code == HOSTNAME_MISMATCH:
        return (
            f"the TLS certificate of {url} does not name the host of that URL ({detail}): use a host name "
            f"the certificate names, or reissue it with this host in its subjectAltName ({CERTIFICATE_RECIPE})"
        )
    return (
        f"the TLS certificate of {url} is not trusted ({detail}): set {CA_BUNDLE_ENV} to the PEM file of "
        f"the CA that signed it ({_bundle_state(env)})"
    )
