"""The job-step fork server (evalwf/worker/fork_server.py): spares forked from one warm parent per worker run real
Snakemake job steps as a fresh spare does (outputs, log, exit status), one after another from the same parent; they
die with the worker and are reaped; a stopping worker hands its step back; a dead parent means fresh spares again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalwf.worker import job_steps
from evalwf.worker.fork_server import ForkedSpare, ForkServer
from evalwf.worker.job_payload import JobStep
from evalwf.worker.job_steps import JobSteps
from evalwf.worker.warm_step import SpareStep
from tests.worker.test_warm_step import SNAKEFILE, _alive, _args, _env, _start

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path[:0] = [sys.argv[2], sys.argv[3]]
    from evalwf.worker.fork_server import ForkServer
    from test_warm_step import _start

    workflow = Path(sys.argv[1])
    server = ForkServer(cwd=str(workflow), grace_s=2.0)
    spare = server.spare()
    _start(spare, workflow, "slept.txt")
    (workflow / "worker.pids").write_text(f"{server.process.pid} {spare.pid}")
    time.sleep(600)
    """
)


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    return tmp_path


@pytest.fixture
def server(workflow: Path) -> Iterator[ForkServer]:
    server = ForkServer(cwd=str(workflow), grace_s=2.0)
    yield server
    server.stop(timeout_s=20)


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _wait_for(condition, what: str, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_two_job_steps_forked_from_one_parent_run_real_jobs_with_their_own_environment(
    server: ForkServer, workflow: Path
) -> None:
    for probe in ("first", "second"):
        spare = server.spare()
        assert spare is not None and spare.alive()
        assert _ppid(spare.pid) == server.process.pid, "the spare is the fork server's child"
        step = _start(spare, workflow, "report.txt", EVAL_PROBE=probe)
        assert step.wait(120) == 0, step.log_tail()
        got_probe, cwd, cmdline = (workflow / "report.txt").read_text().split("|")
        assert (got_probe, cwd) == (probe, str(workflow))  # each step its own environment
        assert "evalwf.worker.fork_server" in cmdline  # forked from the warm parent, not a fresh interpreter
        assert "1 of 1 steps (100%) done" in step.log_tail()
        (workflow / "report.txt").unlink()
        server.learn(str(workflow / "Snakefile"))  # the second spare is forked with the Snakefile parsed
    _wait_for(lambda: not _alive(spare.pid) and not Path(f"/proc/{spare.pid}").exists(), "the spare was not reaped")


def test_a_failing_forked_step_passes_its_exit_status_and_log_through(server: ForkServer, workflow: Path) -> None:
    spare = server.spare()
    assert spare is not None
    step = _start(spare, workflow, "broken.txt")
    assert step.wait(120) == 1
    assert "about to fail" in step.log_tail()


def test_a_killed_worker_takes_its_fork_server_spares_and_steps_with_it(workflow: Path) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(workflow), str(REPO), str(REPO / "tests" / "worker")], env=_env()
    )
    try:
        _wait_for(lambda: (workflow / "sleeper.pid").is_file() and (workflow / "sleeper.pid").read_text().strip(),
                  "the step did not start", timeout_s=120)  # fmt: skip
        server_pid, spare_pid = map(int, (workflow / "worker.pids").read_text().split())
        sleeper = int((workflow / "sleeper.pid").read_text())
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    _wait_for(lambda: not _alive(sleeper), "the job step's command outlived the worker")
    # the spare (its guardian) is reaped by the fork server, which then exits: nothing left, not even a zombie
    _wait_for(lambda: not Path(f"/proc/{spare_pid}").exists(), "the spare outlived the worker or stayed a zombie")
    _wait_for(lambda: not _alive(server_pid), "the fork server outlived the worker")


def _step(workflow: Path, target: str) -> JobStep:
    argv = [sys.executable, "-m", "snakemake", *_args(workflow, target)]
    return JobStep(workdir=str(workflow), argv=argv, outputs=[], logs=[], policy=None, campaign="c")


def test_a_stopping_worker_hands_a_forked_step_back_and_leaves_nothing(workflow: Path) -> None:
    steps = JobSteps(threading.Event(), warm=True)
    try:
        steps.prepare_spare(0, str(workflow))
        outcome: list[int | str] = []
        run = threading.Thread(
            target=lambda: outcome.append(
                steps.run(0, _step(workflow, "slept.txt"), _env(), workflow / "slept.log", threading.Event())
            )
        )
        run.start()
        _wait_for(lambda: (workflow / "sleeper.pid").is_file() and (workflow / "sleeper.pid").read_text().strip(),
                  "the step did not start", timeout_s=120)  # fmt: skip
        sleeper = int((workflow / "sleeper.pid").read_text())
        steps.stop.set()  # what SIGTERM to the worker does
        run.join(30)
        assert outcome == ["stopped"], "handed back, not charged as a failure"
        assert not _alive(sleeper)
    finally:
        steps.discard_all()
    assert steps.fork_server is None and not steps.stopping()


def test_a_dead_fork_server_means_fresh_spares_and_no_lost_step(workflow: Path) -> None:
    steps = JobSteps(threading.Event(), warm=True)
    try:
        steps.prepare_spare(0, str(workflow))
        assert isinstance(steps.spares[0], ForkedSpare)
        server = steps.fork_server
        assert server is not None
        steps.discard_spare(0)
        server.process.kill()  # the warm parent dies
        server.process.wait()
        steps.prepare_spare(0, str(workflow))
        assert isinstance(steps.spares[0], SpareStep), "a fresh-interpreter spare instead"
        step = _step(workflow, "report.txt")
        assert steps.run(0, step, _env(EVAL_PROBE="after"), workflow / "report.log", threading.Event()) == 0
        assert (workflow / "report.txt").read_text().startswith("after|")
        assert steps.fork_server_lost
    finally:
        steps.discard_all()


def test_a_spare_the_dead_server_never_forked_reads_as_gone(workflow: Path) -> None:
    """Asked for before the server died: never alive, so the step starts another way (never handed to nothing)."""
    server = ForkServer(cwd=str(workflow), grace_s=2.0)
    spare = server.spare()
    server.process.kill()  # still importing: it never served the request
    server.process.wait()
    assert spare is not None and not spare.alive()
    assert server.spare() is None
    server.stop(timeout_s=5)


def test_warm_spares_stamp_the_schema_files_they_cached(workflow: Path) -> None:
    """A changed schema file makes a step run cold (and the fork server restart), as a changed module does."""
    from evalwf.worker.warm_step import Inbox, Preloaded, cold_reason, preload_modules

    read, write = os.pipe()  # an open, silent stdin: preload_modules stops importing only on EOF
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        preloaded = preload_modules(("evalwf.plan.config",), Inbox(), str(workflow))
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)
    assert isinstance(preloaded, Preloaded)
    schema = str(REPO / "evalwf" / "plan" / "config.schema.yaml")
    assert schema in preloaded.stamps
    stale = Preloaded(preloaded.cwd, {**preloaded.stamps, schema: preloaded.stamps[schema] - 1})
    assert "config.schema.yaml changed" in (cold_reason(stale, str(workflow)) or "")


def test_without_the_fork_server_spares_are_fresh_interpreters(workflow: Path) -> None:
    steps = JobSteps(threading.Event(), warm=True, forked=False)
    try:
        steps.prepare_spare(0, str(workflow))
        assert isinstance(steps.spares[0], job_steps.SpareStep) and steps.fork_server is None
    finally:
        steps.discard_all()


def test_the_snakefile_memo_returns_what_the_parser_returns_and_parses_a_changed_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import snakemake.api
    import snakemake.workflow
    from snakemake.sourcecache import LocalSourceFile

    from evalwf.worker.warm_step import SnakefileMemo

    (tmp_path / "rules").mkdir()
    (tmp_path / "Snakefile").write_text('include: "rules/a.smk"\n\nrule all:\n    input: "a.txt"\n')
    (tmp_path / "rules" / "a.smk").write_text('rule a:\n    output: "a.txt"\n    shell: "touch {output}"\n')
    original = snakemake.workflow.parse
    parsed: list[str] = []

    def counting(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        parsed.append(path.get_path_or_uri(secret_free=True))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(snakemake.workflow, "parse", counting)
    memo = SnakefileMemo()
    memo.install()  # (monkeypatch restores Snakemake's own parser afterwards)
    memo.learn(str(tmp_path / "Snakefile"))
    included = str(tmp_path / "rules" / "a.smk")
    assert parsed == [str(tmp_path / "Snakefile"), included], "the Snakefile and its include, in order"
    stand_in = SimpleNamespace(sourcecache=SimpleNamespace(open=lambda source, mode="r": open(source.path, mode)))  # noqa: SIM115
    for rulecount in (1, 0):  # as the Snakefile's include asks for it; another rule count is parsed afresh
        lines: dict[int, int] = {}
        got = snakemake.workflow.parse(LocalSourceFile(included), stand_in, lines, rulecount=rulecount)
        fresh_lines: dict[int, int] = {}
        assert got == original(LocalSourceFile(included), stand_in, fresh_lines, rulecount=rulecount)
        assert lines == fresh_lines
    assert parsed == [str(tmp_path / "Snakefile"), included, included], "only the other rule count was parsed"
    (tmp_path / "rules" / "a.smk").write_text('rule b:\n    output: "b.txt"\n    shell: "touch {output}"\n')
    code, _ = snakemake.workflow.parse(LocalSourceFile(included), stand_in, {}, rulecount=1)
    assert "name='b'" in code and len(parsed) == 4, "a changed file is parsed again"
