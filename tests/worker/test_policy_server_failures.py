"""A policy server that dies, never listens, or whose port is taken: clear errors, nothing left running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from evalwf.policy.client import PolicyServerError
from evalwf.policy.spec import PolicySpec
from evalwf.worker import policy_server as policy_server_module
from evalwf.worker.policy_server import GuardedPolicyServer
from evalwf.worker.procfs import descendants


def spec(command: str, timeout: float = 30) -> PolicySpec:
    return PolicySpec.from_config({"name": "p", "command": command, "startup_timeout_s": timeout})


def test_server_that_exits_during_startup_names_status_and_log(tmp_path):
    server = GuardedPolicyServer(log_dir=tmp_path)
    with pytest.raises(PolicyServerError) as error:
        server.ensure(spec("echo loading checkpoint failed: out of memory; exit 3"))
    message = str(error.value)
    assert "exited with status 3 during startup" in message
    assert "out of memory" in message, "the log tail is in the message"
    assert not server.alive()


def test_server_that_never_listens_times_out_and_is_killed(tmp_path):
    server = GuardedPolicyServer(log_dir=tmp_path)
    with pytest.raises(PolicyServerError, match="not ready after 2s"):
        server.ensure(spec("sleep 60", timeout=2))
    assert not server.alive()
    assert not [pid for pid in descendants(os.getpid()) if b"sleep" in _cmdline(pid)], "the server was killed"


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def test_port_held_by_a_stale_process_is_refused(tmp_path, monkeypatch):
    stale = subprocess.Popen(
        [sys.executable, "-c", "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); "
         "print(s.getsockname()[1], flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        port = int(stale.stdout.readline())
        monkeypatch.setattr(policy_server_module, "free_port", lambda host: port)
        server = GuardedPolicyServer(log_dir=tmp_path)
        with pytest.raises(PolicyServerError, match=f"port {port} is already taken"):
            server.ensure(spec("{python} -m benchmarks.standin.policy_server --port {port}"))
    finally:
        stale.kill()
        stale.wait()


def test_server_speaking_on_a_port_it_does_not_own_is_refused(tmp_path, monkeypatch):
    """The endpoint answers, but the listening socket belongs to another process tree: not THIS server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    foreign = subprocess.Popen([sys.executable, "-m", "benchmarks.standin.policy_server", "--port", str(port),
                                "--load-time-s", "1"])  # fmt: skip
    try:
        monkeypatch.setattr(policy_server_module, "free_port", lambda host: port)
        monkeypatch.setattr(policy_server_module, "listening_pids",
                            _listening_after_start(policy_server_module.listening_pids))  # fmt: skip
        server = GuardedPolicyServer(log_dir=tmp_path)
        with pytest.raises(PolicyServerError, match="did not start"):
            server.ensure(spec("sleep 30", timeout=20))
        assert not server.alive()
    finally:
        foreign.kill()
        foreign.wait()


def _listening_after_start(real):
    """The pre-start check sees a free port (the foreign server is still loading); later checks are real."""
    calls = {"n": 0}

    def wrapped(port: int) -> set[int]:
        calls["n"] += 1
        return set() if calls["n"] == 1 else real(port)

    return wrapped


def test_server_is_reused_while_alive_and_restarted_after_it_dies(tmp_path):
    import signal

    from evalwf.policy.client import PolicyClient

    standin = spec("{python} -m benchmarks.standin.policy_server --port {port}")
    with GuardedPolicyServer(log_dir=tmp_path) as server:
        first = server.ensure(standin)
        assert server.ensure(standin) == first and server.loads == 1, "reused while alive and unchanged"
        for pid in descendants(server.process.pid):
            os.kill(pid, signal.SIGKILL)  # the server dies (out of memory, a crash...)
        server.process.wait(10)
        second = server.ensure(standin)
        assert server.loads == 2
        with PolicyClient(second) as client:
            assert client.metadata["server"] == "standin-policy"


def test_gpu_placeholder_inside_a_worker_s_server_is_the_visible_index(tmp_path):
    """A worker of physical GPU 3 runs its server under CUDA_VISIBLE_DEVICES=3: the command gets {gpu} = 0 (what
    `cuda:{gpu}` needs there) and {gpu_physical} = 3 (a real server, the worker's GuardedPolicyServer)."""
    seen = tmp_path / "seen.txt"
    command = (
        f'echo "{{gpu}} {{gpu_physical}} $CUDA_VISIBLE_DEVICES" > {seen}; '
        "exec {python} -m benchmarks.standin.policy_server --port {port}"
    )
    with GuardedPolicyServer(gpu="3", log_dir=tmp_path) as server:
        server.ensure(spec(command))
        assert seen.read_text().split() == ["0", "3", "3"]
