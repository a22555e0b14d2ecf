"""Where a Labtasker client connects: a server's URL (a shared server, which requires its token) or the Unix
socket of a workflow directory's embedded server (whose file permissions are the access control: no token exists,
so none can be sent to a stranger). The submitter, the workers and `status` all build their clients from one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class QueueEndpoint:
    url: str | None = None
    socket: str | None = None
    # for a URL: the token to send (None: the client reads $LABTASKER_TOKEN itself); never shown, never compared
    token: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.url is None) == (self.socket is None):
            raise ValueError("a queue endpoint is a URL or a Unix socket, exactly one of them")

    def client(self, queue: str) -> Any:
        """A Labtasker client of `queue` at this endpoint (a socket client sends no token)."""
        from labtasker import Client

        if self.socket is not None:
            return Client(socket=self.socket, queue=queue)
        return Client(url=self.url, queue=queue, token=self.token)

    def __str__(self) -> str:
        return self.url if self.url is not None else f"unix socket {self.socket}"
