"""A worker tells the queue that its job step starts even while the server's database is busy: a real Labtasker
server answers database_busy when its SQLite write lock is not free within its 5 s busy timeout (as
when hundreds of workers claim at once), and the start is asked again instead of dropped; a start the queue never
recorded would have a submitter's Ctrl-C cancel a step that is running."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
from labtasker_testkit import client, labtasker_url, queue

from evalwf.contract import JOB_STEP_PROGRESS
from evalwf.worker import queue_client
from evalwf.worker.reporting import QueueReports

QUEUE = "evalwf"
HELD_S = 6.5  # longer than the server's busy timeout (5 s): its first answer is database_busy


def hold_write_lock(database: Path, locked: threading.Event, held_s: float) -> None:
    """What a burst of writers does to the server: SQLite's one write lock taken (and released after held_s)."""
    connection = sqlite3.connect(database, timeout=10)
    try:
        connection.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(held_s)
        connection.rollback()
    finally:
        connection.close()


def served_database(url: str) -> Path:
    """The database of the Labtasker server answering on `url`'s port (its daemon's --database)."""
    port = str(urlsplit(url).port)
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        flags = dict(pairwise(argv))
        if "labtasker_server" in argv and flags.get("--port") == port and "--database" in flags:
            return Path(flags["--database"])
    raise AssertionError(f"no Labtasker server process serves {url}")


def test_the_job_step_start_is_reported_through_a_busy_database(
    client: Any, labtasker_url: str, queue: str, tmp_path: Path
) -> None:
    from labtasker import Client

    task = client.submit_task({"job": "one batch"}, name="evaluate_batch", max_attempts=1)
    claim = queue_client.claim(client, route="default", run_id=f"r_{secrets.token_urlsafe(9)}")
    assert claim is not None and claim.task.id == task.id
    reports = QueueReports(lambda: Client(url=labtasker_url, queue=queue), lambda: False, lambda: None)
    locked = threading.Event()
    holder = threading.Thread(target=hold_write_lock, args=(served_database(labtasker_url), locked, HELD_S))
    holder.start()
    assert locked.wait(10), "the test could not take the database's write lock"
    started = time.monotonic()
    assert reports.step_starts(client, claim, "worker-1", tmp_path / "step.log")
    waited = time.monotonic() - started
    holder.join(15)
    progress = client.get_task(task.id).progress or {}
    assert progress.get(JOB_STEP_PROGRESS) == "started", (
        f"the start was dropped while the database was busy (after {waited:.1f} s): progress {progress}"
    )
    assert waited >= HELD_S - 1.0, "the start went through while the write lock was held: nothing was tested"
