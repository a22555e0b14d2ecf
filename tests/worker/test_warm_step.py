"""Warm job steps (evalwf/worker/warm_step.py): a spare guardian with Snakemake imported runs a job step that
behaves like `python -m snakemake ARGS` (outputs, log, exit status, cwd, environment), dies with its owner, and
falls back to a fresh interpreter where reusing the imports could differ."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evalwf.worker import warm_step
from evalwf.worker.job_payload import FIXED_JOB_STEP_OPTIONS
from evalwf.worker.processes import GuardedProcess
from evalwf.worker.warm_step import SpareStep, cold_reason

REPO = Path(__file__).resolve().parents[2]

SNAKEFILE = textwrap.dedent(
    """
    import os

    rule report:
        output: "report.txt"
        run:
            cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
            with open(output[0], "w") as handle:
                handle.write(f"{os.environ.get('EVAL_PROBE')}|{os.getcwd()}|{cmdline}")

    rule broken:
        output: "broken.txt"
        shell: "echo about to fail >&2; exit 3"

    rule sleeper:
        output: "slept.txt"
        shell: "echo $$ > sleeper.pid; exec sleep 120"
    """
)


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    return tmp_path


RULES = {"report.txt": "report", "broken.txt": "broken", "slept.txt": "sleeper"}


def _args(workflow: Path, target: str) -> list[str]:
    """A remote job step's options, as a worker builds them (evalwf/worker/job_payload.py)."""
    rule = RULES[target]
    return [
        *("--snakefile", str(workflow / "Snakefile"), "--target-jobs", f"{rule}:", "--allowed-rules", rule),
        *("--force-use-threads", "--attempt", "1", *FIXED_JOB_STEP_OPTIONS, "--latency-wait", "0", "--mode", "remote"),
    ]


def _spare(cwd: Path) -> SpareStep:
    return SpareStep(cwd=str(cwd), grace_s=2.0)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **extra}


def _start(spare: SpareStep, workflow: Path, target: str, **env: str) -> GuardedProcess:
    log = workflow / "logs" / f"{target}.log"
    process = spare.start(_args(workflow, target), _env(**env), str(workflow), log)
    return GuardedProcess.adopt(process, ["snakemake", target], log)


def test_a_warm_step_is_a_snakemake_run_in_the_given_directory_and_environment(workflow: Path) -> None:
    spare = _spare(workflow)
    step = _start(spare, workflow, "report.txt", EVAL_PROBE="from-the-task")
    assert step.wait(120) == 0, step.log_tail()
    probe, cwd, cmdline = (workflow / "report.txt").read_text().split("|")
    assert probe == "from-the-task"  # the task's environment, not the spare's
    assert cwd == str(workflow)
    assert "evalwf.worker.warm_step" in cmdline  # it did run in the pre-imported process
    assert "1 of 1 steps (100%) done" in step.log_tail()  # Snakemake's own log lines go to the step's log
    assert "running cold" not in step.log_tail()


def test_a_failing_job_step_passes_its_exit_status_and_log_through(workflow: Path) -> None:
    step = _start(_spare(workflow), workflow, "broken.txt")
    assert step.wait(120) == 1  # Snakemake's exit status for a failed job
    assert "about to fail" in step.log_tail()
    assert not (workflow / "broken.txt").exists()


def test_the_job_step_dies_with_its_owner(workflow: Path) -> None:
    step = _start(_spare(workflow), workflow, "slept.txt")
    pid_file = workflow / "sleeper.pid"
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert step.poll() is None, step.log_tail()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    sleeper = int(pid_file.read_text())
    step.stop(timeout_s=20)  # our end of the lifeline closes, as when the worker is killed
    deadline = time.monotonic() + 10
    while _alive(sleeper):
        assert time.monotonic() < deadline, "the job step's command outlived its guardian"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("removed_after_s", [0.0, 0.5])
def test_a_spare_whose_directory_was_removed_still_runs_a_step_elsewhere(
    tmp_path: Path, workflow: Path, removed_after_s: float
) -> None:
    """The spare starts in the previous step's workflow directory; that campaign may be gone when the next task
    (of another allowed directory) arrives, even before the spare got going (then its step runs cold)."""
    previous = tmp_path / "previous"
    previous.mkdir()
    spare = SpareStep(cwd=str(previous), grace_s=2.0)
    time.sleep(removed_after_s)
    previous.rmdir()
    step = _start(spare, workflow, "report.txt", EVAL_PROBE="elsewhere")
    assert step.wait(120) == 0, step.log_tail()
    assert (workflow / "report.txt").read_text().split("|")[:2] == ["elsewhere", str(workflow)]


def test_a_spare_that_gets_no_step_exits_without_running_anything(workflow: Path) -> None:
    spare = _spare(workflow)
    spare.discard()
    assert spare.process.returncode == 0
    assert not (workflow / "logs").exists()


def test_a_waiting_spare_notices_its_owner_gone_without_importing_first(workflow: Path) -> None:
    spare = SpareStep(cwd=str(workflow), grace_s=2.0, preload_after_s=600)
    spare.discard()  # EOF while it waits to start importing: it exits then, not after 600 s (discard waits 5 s)
    assert spare.process.returncode == 0


def test_cold_when_a_preloaded_module_changed(tmp_path: Path) -> None:
    module = tmp_path / "lib" / "thing.py"
    module.parent.mkdir()
    module.write_text("X = 1\n")
    preloaded = warm_step.Preloaded(cwd=str(tmp_path / "elsewhere"), stamps={str(module): module.stat().st_mtime_ns})
    assert cold_reason(preloaded, str(tmp_path / "elsewhere")) is None
    os.utime(module, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert "thing.py changed" in (cold_reason(preloaded, str(tmp_path / "elsewhere")) or "")


def test_cold_when_the_step_would_import_another_checkout(tmp_path: Path, workflow: Path) -> None:
    """A spare started in the repository imported its `evalwf`; a job step of another directory would import
    that directory's copy when cold, so it runs cold (and still succeeds)."""
    jobs = REPO / "evalwf" / "rules" / "jobs.py"
    preloaded = warm_step.Preloaded(cwd=str(REPO), stamps={str(jobs): jobs.stat().st_mtime_ns})
    assert "imported from" in (cold_reason(preloaded, str(tmp_path)) or "")
    assert cold_reason(preloaded, str(REPO)) is None
    spare = SpareStep(cwd=str(REPO), grace_s=2.0)
    step = _start(spare, workflow, "report.txt", EVAL_PROBE="cold")
    assert step.wait(120) == 0, step.log_tail()
    assert "running cold" in (workflow / "logs" / "report.txt.log").read_text()
    probe, cwd, cmdline = (workflow / "report.txt").read_text().split("|")
    assert (probe, cwd) == ("cold", str(workflow))
    assert "-m snakemake" in cmdline


def test_the_worker_option_and_variable_turn_warm_steps_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalwf.worker.main import parse_args

    assert parse_args([]).cold_job_steps is False
    assert parse_args(["--cold-job-steps"]).cold_job_steps is True
    monkeypatch.setenv(warm_step.WARM_ENV, "0")
    assert parse_args([]).cold_job_steps is True


def test_the_module_runs_as_a_script_with_the_workers_interpreter() -> None:
    code = subprocess.run(
        [sys.executable, "-m", "evalwf.worker.warm_step"], input=b"", cwd=REPO, timeout=120, check=False
    ).returncode
    assert code == 0
