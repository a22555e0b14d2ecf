"""The submitter's terminal can go away under it (terminal.py): fast checks of the pieces the Ctrl-C tests
(test_ctrl_c.py) prove end to end with real submitters."""

from __future__ import annotations

import logging
import os
import pty
import select
import subprocess
import sys
import textwrap

import pytest
from snakemake.logging import ColorizingTextHandler

from snakemake_executor_plugin_labtasker.terminal import SurvivingStream, survive_lost_terminal


def test_a_record_reaches_the_log_file_after_the_terminal_pipe_broke(tmp_path):
    """Snakemake's own stream handler re-raises BrokenPipeError (what `| tee` dying causes): wrapped, the write is
    dropped and the log file's handler, after it, still gets the record."""
    reader, writer = os.pipe()
    os.close(reader)  # tee is gone
    logger = logging.getLogger(f"terminal-test-{tmp_path.name}")
    logger.propagate = False
    terminal = ColorizingTextHandler(stream=open(writer, "w"))  # noqa: SIM115 (closed with the handler)
    logfile = logging.FileHandler(tmp_path / "x.snakemake.log")
    logger.addHandler(terminal)
    logger.addHandler(logfile)
    try:
        survive_lost_terminal(logger)
        logger.warning("[labtasker] Ctrl-C: cancelled 3 queued task(s).")
    finally:
        for handler in (terminal, logfile):
            logger.removeHandler(handler)
            handler.close()
    assert isinstance(terminal.stream, SurvivingStream) and terminal.stream.lost
    assert "Ctrl-C: cancelled 3" in (tmp_path / "x.snakemake.log").read_text()


def test_a_hangup_swallowed_on_its_way_is_sent_again_until_the_cancellation_begins():
    """A KeyboardInterrupt raised while Snakemake's stream handler writes is swallowed there: the SIGHUP comes
    again, so the hung-up submitter still cancels."""
    code = textwrap.dedent(
        """
        import os, signal, time
        from snakemake_executor_plugin_labtasker.terminal import interrupt_on_hangup
        state = {"hangups": 0, "cancelling": False}
        def hung_up():
            state["hangups"] += 1
        interrupt_on_hangup(hung_up, cancelling=lambda: state["cancelling"])
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # swallowed, as by the stream handler
        try:
            time.sleep(10)
        except KeyboardInterrupt:
            state["cancelling"] = True
        time.sleep(3)
        print(state["hangups"])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2", "sent again once, then no more after the cancellation began"


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_the_outcome_goes_to_the_controlling_terminal_unless_in_its_background(background):
    """Logged into a pipe (a `tee`), the line also goes to /dev/tty: a real pseudo-terminal that is the child's
    controlling terminal. A background job of that terminal writes nothing there (it could be stopped by SIGTTOU)."""
    report = textwrap.dedent(
        """
        import logging, os
        from snakemake_executor_plugin_labtasker.terminal import to_controlling_terminal
        logger = logging.getLogger("outcome")
        logger.addHandler(logging.StreamHandler(os.fdopen(os.pipe()[1], "w")))
        print(to_controlling_terminal("[labtasker] Ctrl-C: cancelled 2 queued task(s).", logger), flush=True)
        """
    )
    code = textwrap.dedent(
        f"""
        import fcntl, subprocess, sys, termios
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # in the background: a process group of its own, not the terminal's foreground group
        subprocess.run([sys.executable, "-c", {report!r}], process_group=0 if {background} else None, check=True)
        """
    )
    master, slave = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    out, err = child.communicate(timeout=60)
    screen = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            screen += os.read(master, 65536)
        except OSError:
            break
    os.close(master)
    assert child.returncode == 0, err
    assert out.decode().strip() == str(not background)
    assert (b"Ctrl-C: cancelled 2 queued task(s)." in screen) == (not background), screen
