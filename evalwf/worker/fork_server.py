"""One warm parent per worker that forks its job-step spares: Snakemake is imported once per worker, not per batch.

A spare of evalwf/worker/warm_step.py started as a fresh interpreter spends about a CPU-second importing Snakemake
and the Snakefile's modules, once per batch, and holds its own copy of them. The fork server imports them once:

    python -m evalwf.worker.fork_server --requests FD     # internal: a worker starts it, FD one end of a socketpair

and then, for each request on FD (a datagram carrying two file descriptors: the read end of the spare's lifeline
and the write end of its status pipe), forks a spare that is exactly warm_step's spare from there on: the lifeline
becomes its stdin (the job step's spec arrives on it; EOF before a spec: nothing runs; EOF after: the guardian kills
the step's group), it forks the job step and guards it. The spare writes "pid N" when it starts and "exit N" (the job
step's exit status) before it exits on its status pipe: the worker reads both (ForkedSpare), as it would a child's.

A request "snakefile PATH" (the worker's own job-step command names PATH, in an allowed workflow directory) parses
that Snakefile and its includes into the server's memo of Snakemake's parser (warm_step.SnakefileMemo): spares forked
after it inherit the parsed code, and their job steps skip parsing what did not change.

The server starts no thread and holds no lock while it forks; it is a child subreaper and reaps every child it
forked (and any orphan of theirs), so none is left a zombie. On EOF on its stdin (the worker stopped or died) it
forks no more, waits for its children (their own lifelines closed with the worker), kills what is left after a
bound, and exits. When a preloaded module file changed since it was imported it forks no more spares (that
request's spare reads as gone: its step starts cold), closes its end of the requests (the worker's next request
fails, and it starts a new server, which imports what a fresh interpreter would), reaps its spares as they end, and
exits with STALE_EXIT. When the server is gone otherwise the worker starts its spares as fresh interpreters again
(evalwf/worker/job_steps.py): no batch is lost.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from evalwf.worker.guardian import become_subreaper, kill_leftover_children
from evalwf.worker.processes import GuardedProcess
from evalwf.worker.procfs import children_of
from evalwf.worker.warm_step import (
    PRELOAD,
    Inbox,
    Preloaded,
    SnakefileMemo,
    StepSpec,
    cold_reason,
    preload_modules,
    serve_one_step,
)

STALE_EXIT = 75  # a preloaded module changed: start a new server
CHILDREN_EXIT_S = 30.0  # after EOF: how long the server waits for its spares' own lifelines to end them
REAP_EVERY_S = 0.5


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _fork_spare(preloaded: Preloaded, requests: socket.socket, lifeline: int, status: int, grace_s: float) -> None:
    """Fork one spare; in the child, the lifeline becomes stdin and the status pipe tells the worker about it."""
    pid = os.fork()
    if pid != 0:
        return
    code = 1
    try:
        requests.close()
        os.dup2(lifeline, 0)
        os.close(lifeline)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.write(status, f"pid {os.getpid()}\n".encode())
        code = serve_one_step(preloaded, Inbox(), grace_s, close_in_step=(status,))
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            os.write(status, f"exit {code}\n".encode())
        except OSError:
            pass
        sys.stderr.flush()
        os._exit(code)


def serve(requests: socket.socket, grace_s: float) -> int:
    """Preload, then fork a spare per request until EOF on stdin (or the worker's end of `requests` closes)."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except FileNotFoundError:  # gone already: every step runs cold (warm_step.cold_reason)
        cwd = "/"
    preloaded = preload_modules(PRELOAD, Inbox(), cwd)
    if preloaded is None:
        return 0
    memo = SnakefileMemo()
    memo.install()
    gc.freeze()  # what is imported now stays shared with the spares: the collector does not touch (copy) its pages
    retiring = False
    while True:
        ready = select.select([0, requests], [], [], REAP_EVERY_S)[0]
        _reap()
        if 0 in ready and not os.read(0, 4096):
            break
        if requests not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(requests, 1024, 2)
        except OSError:
            break
        if not message:
            break  # the worker's end closed
        if message.startswith(b"snakefile "):
            for fd in fds:
                os.close(fd)
            memo.learn(os.fsdecode(message[len(b"snakefile ") :]))
            gc.freeze()
            continue
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        lifeline, status = fds
        try:
            if cold_reason(preloaded, cwd) is not None:
                retiring = True
                break  # the fds close below: that spare reads as gone
            _fork_spare(preloaded, requests, lifeline, status, grace_s)
        finally:
            os.close(lifeline)
            os.close(status)
    if retiring:
        return _retire(requests)
    _end_children()
    return 0


def _retire(requests: socket.socket) -> int:
    """Preloaded modules changed: serve no more (the worker's next request fails and it starts a new server), but
    reap the spares still running until they end (their lifelines end them), then exit with STALE_EXIT."""
    requests.close()
    while children_of(os.getpid()):
        if select.select([0], [], [], REAP_EVERY_S)[0] and not os.read(0, 4096):
            _end_children()  # the worker stopped or died meanwhile
            break
        _reap()
    _reap()
    return STALE_EXIT


def _end_children() -> None:
    """Wait for every spare to end (their lifelines close with the worker), then kill and reap what is left."""
    deadline = time.monotonic() + CHILDREN_EXIT_S
    while children_of(os.getpid()) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    kill_leftover_children(_reap)


def main(argv: list[str]) -> int:
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    if "--requests" not in options:
        print("usage: python -m evalwf.worker.fork_server --requests FD [--grace S]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the worker's terminal: the worker closes our stdin
    become_subreaper()
    requests = socket.socket(fileno=int(options["--requests"]))
    return serve(requests, float(options.get("--grace", 5.0)))


class ForkedSpare:
    """The worker's side of one forked spare: what SpareStep offers (alive, start, discard) and, once started, what
    GuardedProcess needs of its guardian (pid, poll, wait, kill, the lifeline as stdin)."""

    def __init__(self, lifeline: int, status: int):
        self.stdin = os.fdopen(lifeline, "wb")
        self.args = [sys.executable, "-m", "evalwf.worker.fork_server", "(spare)"]
        self.returncode: int | None = None
        self._status = status
        os.set_blocking(status, False)  # a slot's thread and the worker's may both poll: neither may block reading
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._buffer = b""

    def _read(self, timeout_s: float | None) -> None:
        """Read what the spare wrote on its status pipe, waiting up to timeout_s for something."""
        if self.returncode is not None:
            return
        try:
            select.select([self._status], [], [], timeout_s)
        except (OSError, ValueError):  # closed by another thread that read the end meanwhile
            return
        with self._lock:
            if self.returncode is not None:
                return
            try:
                chunk = os.read(self._status, 4096)
            except BlockingIOError:  # nothing (yet), or another thread read it first
                return
            self._buffer += chunk
            for line in self._buffer.decode(errors="replace").splitlines():
                word, _, value = line.partition(" ")
                if word == "pid" and value.isdigit():
                    self._pid = int(value)
                elif word == "exit" and value.lstrip("-").isdigit():
                    self.returncode = int(value)
            if not chunk and self.returncode is None:  # it died without saying how: killed
                self.returncode = -signal.SIGKILL
            if self.returncode is not None:
                os.close(self._status)

    @property
    def pid(self) -> int:
        deadline = time.monotonic() + 60
        while self._pid is None and self.returncode is None and time.monotonic() < deadline:
            self._read(0.1)
        return self._pid or 0

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read(remaining)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None and self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def alive(self) -> bool:
        """Forked and not ended (waits for the fork: a request the server never served reads as not alive)."""
        return self.pid != 0 and self.poll() is None

    def start(self, args: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path) -> ForkedSpare:
        """Hand it the job step; our end of its stdin stays open as the lifeline."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.stdin.write(StepSpec(tuple(args), dict(env), cwd, str(log_path)).to_line())
        self.stdin.flush()
        return self

    def discard(self) -> None:
        """EOF before a spec: it exits without running anything (killed if it does not within 5 s)."""
        GuardedProcess.adopt(self, self.args, None).stop(timeout_s=5.0)


class ForkServer:
    """The worker's side of its fork server: one per worker, started in the workflow directory of its first spare."""

    def __init__(self, cwd: str, grace_s: float):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "evalwf.worker.fork_server"),
                    *("--requests", str(theirs.fileno()), "--grace", str(grace_s)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                cwd=cwd,
                pass_fds=[theirs.fileno()],
            )
        finally:
            theirs.close()
        self.requests = ours
        self.lock = threading.Lock()
        self.learned: set[str] = set()

    def learn(self, snakefile: str) -> None:
        """Have it parse this Snakefile (and its includes) once, for the spares it forks from now on."""
        if snakefile in self.learned or not os.path.isabs(snakefile) or not self.alive():
            return
        self.learned.add(snakefile)
        try:
            with self.lock:
                self.requests.send(b"snakefile " + os.fsencode(snakefile))
        except OSError:
            pass  # gone: the next spare request finds out

    def alive(self) -> bool:
        return self.process.poll() is None

    def spare(self) -> ForkedSpare | None:
        """A new spare, or None when the server is gone (the caller starts one as a fresh interpreter)."""
        if not self.alive():
            return None
        lifeline_r, lifeline_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            with self.lock:
                socket.send_fds(self.requests, [b"spare"], [lifeline_r, status_w])
        except OSError:
            os.close(lifeline_w)
            os.close(status_r)
            return None
        finally:
            os.close(lifeline_r)
            os.close(status_w)
        return ForkedSpare(lifeline_w, status_r)

    def stop(self, timeout_s: float = CHILDREN_EXIT_S + 5.0) -> int | None:
        """EOF on its stdin: it forks no more, waits for its spares to end, and exits."""
        code = GuardedProcess.adopt(self.process, self.process.args, None).stop(timeout_s=timeout_s)
        self.requests.close()
        return code


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
