"""Guardian: runs one command in its own process group and kills that group when its parent goes away.

Usage (internal: workers start it around every child): python -m evalwf.worker.guardian [--grace S] -- CMD ...

The parent holds the write end of our stdin. When the parent dies for any reason (kill -9 included) the
kernel closes that pipe, we read EOF and kill the whole group, then reap. We are a child subreaper, so
descendants that daemonise or leave the group are re-parented to us and killed and reaped too, even where
PID 1 does not reap. SIGTERM/SIGINT to the guardian do the same. The exit status is the command's.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from evalwf.worker.procfs import children_of

PR_SET_CHILD_SUBREAPER = 36


class Child(Protocol):
    """What the guardian needs of the command's process (a subprocess.Popen, or a forked job step)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


def kill_leftover_children(reap: Callable[[], None]) -> None:
    """SIGKILL every child still left (also those reparented to this subreaper since) and reap them with `reap`,
    until none is left or 100 rounds have passed."""
    for _ in range(100):
        leftovers = children_of(os.getpid())
        if not leftovers:
            break
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
        time.sleep(0.02)
    reap()


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process (Linux), which kills and reaps them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the process-group kill still applies


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_all(main_child: Child) -> None:
    """Reap the command first (to keep its exit status), then any re-parented descendants."""
    if main_child.poll() is None:
        return
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_everything(main_child: Child, grace_s: float) -> None:
    """TERM the group, wait up to grace_s, then KILL the group and every remaining descendant; reap."""
    pgid = main_child.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap_all(main_child)
        if not children_of(os.getpid()):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    kill_leftover_children(lambda: _reap_all(main_child))


def main(argv: list[str]) -> int:
    grace_s = 5.0
    if argv[:1] == ["--grace"]:
        grace_s, argv = float(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m evalwf.worker.guardian [--grace S] -- CMD ...", file=sys.stderr)
        return 2
    become_subreaper()
    stop = stop_on_signals()
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    return guard_child(child, grace_s, stop)


def stop_on_signals() -> threading.Event:
    """SIGTERM/SIGINT/SIGHUP to the guardian: stop the command (the event), never die without killing it."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def guard_child(child: Child, grace_s: float, stop: threading.Event) -> int:
    """Wait for the command (its own process group, led by child.pid) while watching the lifeline on fd 0; on
    EOF or a stop signal kill the group and every descendant; reap. The command's exit status."""

    def watch_lifeline() -> None:
        # raw reads on fd 0: a daemon thread blocked in sys.stdin.buffer would hold its lock at interpreter
        # shutdown and abort the process (exit -6) after the command succeeded
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_lifeline, daemon=True).start()
    while child.poll() is None and not stop.wait(0.1):
        pass
    _kill_everything(child, grace_s)
    returncode = child.wait()
    _reap_leftovers()
    return returncode if returncode >= 0 else 128 - returncode


def _reap_leftovers(deadline_s: float = 2.0) -> None:
    """Reap every remaining (re-parented) descendant, killing any still alive: none may outlive us as a zombie
    handed to a PID 1 that never reaps."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        for leftover in children_of(os.getpid()):
            try:
                os.kill(leftover, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter shutdown: the lifeline thread may still be blocked reading fd 0
