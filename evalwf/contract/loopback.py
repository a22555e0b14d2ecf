"""Loopback: traffic to local servers never goes through a proxy (httpx, Labtasker's client, and websockets >= 15
honour http_proxy / ALL_PROXY even for 127.0.0.1, so every process that talks to a local server uses
with_loopback_no_proxy), and free loopback ports for the servers a process starts (the embedded Labtasker server,
a worker's policy server)."""

from __future__ import annotations

import socket
from collections.abc import MutableMapping

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def with_loopback_no_proxy(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the loopback hosts to no_proxy / NO_PROXY in `env` (in place; returned for chaining)."""
    for key in ("no_proxy", "NO_PROXY"):
        hosts = [h.strip() for h in env.get(key, "").split(",") if h.strip()]
        env[key] = ",".join(dict.fromkeys([*hosts, *LOOPBACK_HOSTS]))
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
