"""Which of a worker's threads wait for the queue server right now, and since when.

A stopping worker must not wait for a hung server (a request may block for the client's whole timeout), but it must
also not give up on a slot that is still busy with its own work (stopping its job step, handing its task back on a
loaded machine): that task would then be charged an attempt and come back only when its lease expires. Timing the
slot's requests tells the two apart: a slot is left behind only while one of its requests has been outstanding for
longer than a healthy server takes to answer.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any


class ServerWaits:
    def __init__(self) -> None:
        self._since: dict[int, float] = {}  # thread ident -> when its outstanding request began
        self._lock = threading.Lock()

    def track(self, client: Any) -> Any:
        """`client` with every method call timed as a wait for the server of the calling thread."""
        return _TimedClient(client, self)

    def waiting_for(self, thread: threading.Thread) -> float:
        """How long `thread` has been waiting for a reply of the server (0: it is not waiting for one)."""
        with self._lock:
            since = self._since.get(thread.ident or -1)
        return 0.0 if since is None else time.monotonic() - since

    def _begin(self) -> bool:
        ident = threading.get_ident()
        with self._lock:
            if ident in self._since:  # a call made by a call already timed: the outer one counts
                return False
            self._since[ident] = time.monotonic()
            return True

    def _end(self) -> None:
        with self._lock:
            self._since.pop(threading.get_ident(), None)


class _TimedClient:
    """A Labtasker client whose calls are timed by ServerWaits; everything else passes through."""

    def __init__(self, client: Any, waits: ServerWaits):
        self._client = client
        self._waits = waits

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._client, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def timed(*args: Any, **kwargs: Any) -> Any:
            outer = self._waits._begin()
            try:
                return value(*args, **kwargs)
            finally:
                if outer:
                    self._waits._end()

        return timed
