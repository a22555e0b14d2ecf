"""Start commands under a guardian so that they die with us, even after kill -9."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Protocol


class Guardian(Protocol):
    """What GuardedProcess needs of a guardian's process: a subprocess.Popen, or a forked spare
    (evalwf/worker/fork_server.py ForkedSpare) whose stdin is the lifeline."""

    pid: int
    args: list[str]
    returncode: int | None
    stdin: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class GuardedProcess:
    """A command run under evalwf.worker.guardian; our end of its stdin pipe is the lifeline."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        grace_s: float = 5.0,
    ):
        self.argv = list(argv)
        self.log_path = Path(log_path) if log_path else None
        log = None
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "evalwf.worker.guardian", "--grace", str(grace_s), "--", *self.argv],
                stdin=subprocess.PIPE,
                stdout=log if log else None,
                stderr=subprocess.STDOUT if log else None,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        finally:
            if log:
                log.close()

    @classmethod
    def adopt(cls, process: Guardian, argv: Sequence[str], log_path: Path | None) -> GuardedProcess:
        """A guardian started otherwise (a warm job step, evalwf.worker.warm_step) whose stdin is ours."""
        guarded = cls.__new__(cls)
        guarded.argv = list(argv)
        guarded.log_path = log_path
        guarded._process = process
        return guarded

    @property
    def pid(self) -> int:
        """The guardian's pid (the command runs as its child, in a process group of its own)."""
        return self._process.pid

    def poll(self) -> int | None:
        return self._process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._process.wait(timeout)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """Cut the lifeline (the guardian kills and reaps the group), then make sure the guardian is gone."""
        if self._process.stdin and not self._process.stdin.closed:
            try:
                self._process.stdin.close()
            except OSError:
                pass
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait()

    def log_tail(self, max_chars: int = 2000) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_chars))
            return handle.read().decode("utf-8", errors="replace")
