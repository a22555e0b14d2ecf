"""Process facts through psutil, not hand-written /proc walks; zombies count as gone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from conftest import REPO

from evalwf.worker.procfs import children_of, descendants, listening_pids


def test_procfs_reads_no_proc_files_itself():
    source = (REPO / "evalwf" / "worker" / "procfs.py").read_text()
    assert '"/proc' not in source and 'f"/proc' not in source and "listdir" not in source


def test_children_descendants_and_zombies():
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(30)']); time.sleep(30)"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not descendants(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (grandchild,) = descendants(parent.pid)
        assert parent.pid in children_of(os.getpid()) and children_of(parent.pid) == [grandchild]
        parent.kill()
        time.sleep(0.2)  # a zombie until we reap it
        assert parent.pid not in children_of(os.getpid())
        os.kill(grandchild, 9)
    finally:
        parent.kill()
        parent.wait()


def test_listening_pids_finds_our_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert os.getpid() not in listening_pids(port)
        server.listen()
        assert listening_pids(port) == {os.getpid()}
