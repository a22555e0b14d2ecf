"""Which process answers a loopback policy connection: the job step sends no observation before it has verified that
the server it talks to is the one its worker started (DESIGN invariants 5 and 6).

A worker's policy server listens on a loopback TCP port that any local user can connect to, and once it dies any
local user can bind that port. A user's own openpi server cannot be asked to echo a secret, so the check is the
kernel's word instead: the worker names the process it started (`pid:start time`, the job step's context:
evalwf.contract.job_step_context), and the
client finds, in /proc/net/tcp(6), the server's end of its own connection and requires that socket to be held by
that process or one of its descendants. A stranger on the port, a process that merely reuses the pid, or a server
this user may not inspect is refused. Linux only (/proc); standard library only (the light core).
"""

from __future__ import annotations

import os
import socket

from evalwf.common.tcp_ends import accepting_socket


class NotOurServer(RuntimeError):
    """The process answering the connection is not the policy server the worker started."""


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on: the command name in parentheses may hold spaces."""
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    return text[text.rindex(")") + 2 :].split()


def process_identity(pid: int) -> str:
    """`pid:start time` (clock ticks since boot): names one process, never a later one given the same pid."""
    return f"{pid}:{_stat_fields(pid)[19]}"


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(_stat_fields(int(entry))[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    return children


def _tree(root: int) -> list[int]:
    children, found, pending = _children(), [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def _holds(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def verify_server(connection: socket.socket, expected: str, endpoint: str) -> None:
    """Raise NotOurServer unless the server's end of `connection` belongs to process `expected` (`pid:start
    time`, process_identity) or one of its descendants."""
    try:
        pid_text, _ = expected.split(":")
        root = int(pid_text)
    except ValueError:
        raise NotOurServer(f"the server process {expected!r} is not 'pid:start time'") from None
    refused = f"policy server {endpoint} is not the one this worker started (process {root}): no observation sent;"
    try:
        alive = process_identity(root) == expected
    except (OSError, IndexError):
        alive = False
    if not alive:
        raise NotOurServer(f"{refused} that process is gone, and something else answers on its port")
    accepting = accepting_socket(connection)
    if accepting is None:
        raise NotOurServer(f"{refused} the server's end of the connection is not in /proc/net/tcp")
    if not any(_holds(pid, accepting.inode) for pid in _tree(root)):
        raise NotOurServer(
            f"{refused} the answering socket belongs to another process (one that took the port after the worker's "
            "server stopped?)"
        )
