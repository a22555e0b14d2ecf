"""Process and socket facts (psutil, which Snakemake already needs): who is whose child, who listens on a port.

Zombies count as gone: a guardian reaps them, and waiting for one to exit would wait forever.
"""

from __future__ import annotations

import psutil


def _live(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # exited (or reaped) meanwhile
        return False


def children_of(pid: int) -> list[int]:
    """Direct live children of pid (including orphans re-parented to it, a subreaper or PID 1)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return []
    return [child.pid for child in children if _live(child)]


def descendants(pid: int) -> set[int]:
    """Every live (non-zombie) descendant of pid."""
    try:
        found = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return set()
    return {process.pid for process in found if _live(process)}


def listening_pids(port: int) -> set[int]:
    """Pids holding a listening TCP socket on `port` (any address); sockets of processes we may not inspect (other
    users') come without a pid and are left out."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
