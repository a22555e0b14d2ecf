"""Ctrl-C of a submitter keeps its promise (real server, worker and snakemake): queued tasks and claimed tasks
whose job step has not started are cancelled (such a step would only wait for the submitter's removed files and
fail), running job steps finish, and the summary line is the last word, not buried under error blocks. It does so
however the submitter was started: through `| tee` (which the same Ctrl-C kills), with its standard descriptors
closed, and when its terminal hangs up (SIGHUP); the summary then reaches Snakemake's log file."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import fcntl
import os
import pty
import select
import shlex
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from conftest import SNAKEFILE, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, all_tasks, client, labtasker_url, queue, wait_for, workers

pytestmark = pytest.mark.slow
LOAD_S = 15


def submit_command(workdir: Path, labtasker_url: str, queue: str, tasks: list[str], load_s: float = 0) -> list[str]:
    """The snakemake command of a small stand-in campaign of `tasks` (suite alpha) in `workdir`."""
    workdir.mkdir()
    config = standin_config(workdir, standin={"suites": {"alpha": tasks}, "episodes_per_task": 4, "batch_size": 2})
    if load_s:
        config["policy"]["command"] += f" --load-time-s {load_s}"  # a checkpoint that takes a while to load
    configfile = write_config(workdir / "campaign.yaml", config)
    return [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url,
        "--labtasker-queue", queue,
    ]  # fmt: skip


def test_ctrl_c_cancels_claimed_tasks_whose_job_step_has_not_started(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "wf"
    command = submit_command(workdir, labtasker_url, queue, ["reach"], load_s=LOAD_S)
    workers.start("w", allow=[workdir, REPO])
    with open(tmp_path / "submit.log", "wb") as out:
        submitter = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)

    def claimed_batch():
        return next((t for t in all_tasks(client) if t.name.startswith("evaluate_batch") and t.status == "running"), 0)

    batch = wait_for(claimed_batch, 120, "a batch claimed while its policy server loads")
    submitter.send_signal(signal.SIGINT)
    assert submitter.wait(60) != 0
    log = (tmp_path / "submit.log").read_text()
    summary = "Ctrl-C: cancelled 1 queued task(s) and 1 claimed task(s) whose job step had not started"
    assert summary in log, log[-3000:]
    after = log.split(summary, 1)[1]
    assert "Error in rule evaluate_batch" not in after, "error blocks after the summary"
    assert "WorkflowError" not in after and "did not complete successfully" not in after, after
    assert client.get_task(batch.id).status == "cancelled"
    # once its policy server is up, the worker sees the cancellation and never starts the job step
    worker_log = tmp_path / "workers" / "w" / "worker.out"
    wait_for(lambda: "cancelled before its job step started" in worker_log.read_text(), LOAD_S + 60, "the worker")
    steps = workdir / ".snakemake" / "labtasker" / "tasks" / batch.id
    assert not list(steps.glob("*.log")), "the job step of a cancelled task was started"
    assert client.get_task(batch.id).status == "cancelled"
    assert {t.status for t in all_tasks(client) if t.name.startswith("evaluate_batch")} == {"cancelled"}


def through_tee(
    command: list[str], tmp_path: Path, sig: signal.Signals = signal.SIGINT
) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    """`snakemake ... 2>&1 | tee log` on a pseudo-terminal that is its controlling terminal, in a process group of
    its own; Ctrl-C (or `kill -TERM` of the group) reaches the whole group: tee dies with it, and the submitter's
    next write goes into a pipe nobody reads. What the terminal shows is kept in terminal.log."""
    shell = f"{shlex.join(command)} 2>&1 | tee {shlex.quote(str(tmp_path / 'tee.log'))}"
    process, close = on_a_terminal(["bash", "-c", shell], tmp_path)

    def interrupt() -> None:
        if sig == signal.SIGINT:  # as the terminal sends it: to the whole foreground group
            os.killpg(process.pid, sig)
        else:  # `kill -TERM` of the pipeline's processes; the shell that started them (the session's leader) stays
            for child in psutil.Process(process.pid).children():
                child.send_signal(sig)
        process.wait(60)
        close()

    return process, interrupt


def on_a_terminal(command: list[str], tmp_path: Path) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    """`command` in a session of its own whose controlling terminal is a pseudo-terminal, read as a terminal would
    into terminal.log; the callable closes the terminal's side (what a dropped ssh connection does)."""
    master, slave = pty.openpty()

    def session() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a login session's default, also under a nohup'ed test run
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=session
    )
    os.close(slave)
    hang_up = threading.Event()

    def terminal() -> None:
        with open(tmp_path / "terminal.log", "wb") as screen:
            while not hang_up.is_set():
                if select.select([master], [], [], 0.2)[0]:
                    try:
                        screen.write(os.read(master, 65536))
                    except OSError:
                        break
        os.close(master)

    reader = threading.Thread(target=terminal, daemon=True)
    reader.start()
    return process, lambda: (hang_up.set(), reader.join(10))


def with_closed_stdio(command: list[str], tmp_path: Path) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    """Started with stdout and stderr closed (`>&- 2>&-`), then Ctrl-C."""
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=lambda: (os.close(1), os.close(2))
    )
    return process, lambda: os.killpg(process.pid, signal.SIGINT)


def on_a_terminal_that_hangs_up(
    command: list[str], tmp_path: Path
) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    """On a pseudo-terminal that is its controlling terminal; closing the terminal's side (an ssh connection
    dropped, a tmux pane closed) makes the kernel send SIGHUP, and later writes fail."""
    return on_a_terminal(command, tmp_path)


def tee_killed_by_sigterm(command: list[str], tmp_path: Path) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    return through_tee(command, tmp_path, signal.SIGTERM)


@pytest.mark.parametrize(
    ("start", "summary"),
    [
        (through_tee, "Ctrl-C: cancelled"),
        (tee_killed_by_sigterm, "SIGTERM: cancelled"),
        (with_closed_stdio, "Ctrl-C: cancelled"),
        (on_a_terminal_that_hangs_up, "SIGHUP (the terminal went away): cancelled"),
    ],
    ids=["tee", "tee-sigterm", "closed-stdio", "sighup"],
)
def test_interrupt_cancels_every_queued_task_however_snakemake_was_started(
    start, summary, labtasker_url, queue, client, tmp_path
):
    """No worker: the campaign's first tasks stay queued until the interrupt, which must cancel every one of them
    and say so in Snakemake's log file (the terminal may be gone) and, through a `| tee` that the same signal
    killed, on the controlling terminal: what was cancelled, what keeps running, how to resume."""
    workdir = tmp_path / "wf"
    submitter, interrupt = start(submit_command(workdir, labtasker_url, queue, ["reach", "push"]), tmp_path)
    try:
        wait_for(lambda: len(all_tasks(client)) >= 2, 120, "the campaign's first tasks queued")
        interrupt()
        assert submitter.wait(60) != 0
    finally:
        if submitter.poll() is None:
            os.killpg(submitter.pid, signal.SIGKILL)
    tasks = all_tasks(client)
    assert tasks and {t.status for t in tasks} == {"cancelled"}, [(t.name, t.status) for t in tasks]
    (logfile,) = (workdir / ".snakemake" / "log").glob("*.snakemake.log")
    assert f"[labtasker] {summary} {len(tasks)} queued task(s)" in logfile.read_text(), logfile.read_text()[-3000:]
    if start in (through_tee, tee_killed_by_sigterm):  # the terminal shows the outcome, not only `^C`
        screen = (tmp_path / "terminal.log").read_text(errors="replace")
        outcome = f"[labtasker] {summary} {len(tasks)} queued task(s); no job step keeps running. To resume, rerun"
        assert outcome in screen, screen[-3000:]
