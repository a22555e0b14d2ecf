"""The policy client every adapter uses: openpi websocket protocol, bounded connect retries, per-call timeouts.

Loopback endpoints never go through a proxy (websockets >= 15 would honour http_proxy even for 127.0.0.1).
"""

from __future__ import annotations

import time
from urllib.parse import urlparse

import websockets
from websockets.exceptions import InvalidHandshake, WebSocketException
from websockets.sync.client import ClientConnection, connect

from evalwf.contract.loopback import LOOPBACK_HOSTS
from evalwf.policy import wire as msgpack_numpy
from evalwf.policy.peer import NotOurServer, verify_server
from evalwf.policy.wire import Message

# websockets 17 wants legacy=True for this frame-level use; 16.0, the newest for Python 3.10 (RoboTwin's
# interpreter, scripts/setup_robotwin.sh), has no such option and would reject it.
VERSION_OPTIONS: dict[str, bool] = {"legacy": True} if int(websockets.__version__.split(".")[0]) >= 17 else {}


class PolicyServerError(RuntimeError):
    """The policy server is unreachable, timed out, or answered with an error."""


class PolicyClient:
    """Synchronous openpi-compatible client: metadata on connect, infer(obs) -> {"actions": [H, A], ...}."""

    def __init__(
        self,
        endpoint: str,
        *,
        connect_timeout_s: float = 60.0,
        call_timeout_s: float | None = None,
        retry_interval_s: float = 0.5,
        server_process: str | None = None,
    ):
        """call_timeout_s: how long one infer() waits for its answer (policy.infer_timeout_s; None: its default).
        server_process: the policy server process its worker started (`pid:start time`, evalwf.policy.peer): the
        connection is refused unless that process holds the server's end of it, before anything is sent."""
        if call_timeout_s is None:
            from evalwf.policy.schema import policy_defaults

            call_timeout_s = float(policy_defaults()["infer_timeout_s"])
        self.endpoint = endpoint
        self.call_timeout_s = call_timeout_s
        self.server_process = server_process
        self._connection, self.metadata = self._connect(connect_timeout_s, retry_interval_s)

    def _connect(self, timeout_s: float, retry_interval_s: float) -> tuple[ClientConnection, Message]:
        host = urlparse(self.endpoint).hostname or ""
        proxy_option: dict[str, None] = {"proxy": None} if host in LOOPBACK_HOSTS else {}
        deadline = time.monotonic() + timeout_s
        attempts = 0
        while True:
            attempts += 1
            remaining = deadline - time.monotonic()
            try:
                connection = connect(
                    self.endpoint,
                    compression=None,
                    max_size=None,
                    ping_interval=None,
                    **VERSION_OPTIONS,
                    open_timeout=max(1.0, min(10.0, remaining)),
                    **proxy_option,
                )
                self._verify(connection)
                metadata = msgpack_numpy.unpackb(connection.recv(timeout=max(1.0, remaining)))
                return connection, metadata
            except (OSError, TimeoutError, InvalidHandshake, WebSocketException) as exc:
                if time.monotonic() + retry_interval_s >= deadline:
                    raise PolicyServerError(
                        f"cannot connect to policy server {self.endpoint} after {attempts} attempts "
                        f"in {timeout_s:.0f}s: {exc}. Is the server running (see the worker log)?"
                    ) from exc
                time.sleep(retry_interval_s)

    def _verify(self, connection: ClientConnection) -> None:
        """The server's end of the connection belongs to the process its worker started (when it names one)."""
        if self.server_process is None:
            return
        try:
            verify_server(connection.socket, self.server_process, self.endpoint)
        except NotOurServer as error:
            connection.close()
            raise PolicyServerError(str(error)) from None

    def infer(self, observation: Message) -> Message:
        try:
            self._connection.send(msgpack_numpy.packb(observation))
            reply = self._connection.recv(timeout=self.call_timeout_s)
        except TimeoutError as exc:
            raise PolicyServerError(
                f"policy server {self.endpoint} did not answer within {self.call_timeout_s:g}s "
                "(policy.infer_timeout_s; raise it for a policy whose first call compiles or loads)"
            ) from exc
        except (OSError, WebSocketException) as exc:
            raise PolicyServerError(f"policy server {self.endpoint} connection lost: {exc}") from exc
        if isinstance(reply, str):
            raise PolicyServerError(f"policy server {self.endpoint} failed during inference:\n{reply}")
        return msgpack_numpy.unpackb(reply)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_endpoint(endpoint: str, *, timeout_s: float = 30.0, what: str = "policy server") -> Message:
    """The openpi handshake as a health check: connect, read the server's metadata, close. Raises
    PolicyServerError naming the endpoint when no openpi server answers within `timeout_s`."""
    try:
        with PolicyClient(endpoint, connect_timeout_s=timeout_s) as client:
            metadata = client.metadata
    except PolicyServerError as error:
        raise PolicyServerError(
            f"{what} {endpoint}: no openpi websocket server answered the handshake within {timeout_s:.0f}s "
            f"({error.__cause__ or error}). Start the server first, check the host and port (and a firewall or "
            "proxy between here and there), or raise policy.startup_timeout_s while it loads."
        ) from error
    if not isinstance(metadata, dict):
        raise PolicyServerError(
            f"{what} {endpoint}: the handshake's first message is not an openpi metadata dict: {metadata!r:.200}"
        )
    return metadata
