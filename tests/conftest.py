"""Shared fixtures: a repository-relative Snakemake runner and small stand-in campaign configs."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from file_order import FileSecondsRecorder, expected_seconds, order_by_expected_seconds, recorded_seconds

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

# A suite started in the background of a non-interactive shell (`make test &`, some CI runners) inherits SIGINT
# ignored, and so would every snakemake and worker it starts: the Ctrl-C tests would see a Ctrl-C ignored. A
# handler here makes the children start with the default disposition again (an ignored signal stays ignored
# across exec, a handled one does not).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def frames_shown(output: str) -> list[str]:
    """The traceback lines in a command's output: Python's ("Traceback (most recent call last):") and the frames
    Snakemake prints after an error's message ('  File "...", line N, in function')."""
    return [line for line in output.splitlines() if line.startswith("Traceback") or line.startswith('  File "')]


def missing_facts(message: str, *facts: str) -> list[str]:
    """The facts (a key, a value, a path, the fix) a message fails to carry. Message tests assert these, not the
    whole sentence, so rewording a message breaks no test while dropping a fact does:
    `assert not missing_facts(line, "1/4 batches done", "2 running"), line`."""
    return [fact for fact in facts if fact not in message]


def standin_config(results_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A small stand-in campaign: 2 suites, 3 tasks, 5 episodes per task in batches of 2."""
    section = {
        "suites": {"alpha": ["reach", "push"], "beta": ["open"]},
        "episodes_per_task": 5,
        "batch_size": 2,
        "max_steps": 30,
    }
    section.update(overrides.pop("standin", {}))
    config = {
        "run": "t",
        "results_dir": str(results_dir / "results"),
        "manifest_cache": str(results_dir / "cache"),
        "policy": {
            "name": "standin-policy",
            "command": "{python} -m benchmarks.standin.policy_server --port {port} --noise 1.2",
            "startup_timeout_s": 60,
        },
        "benchmarks": {"standin": section},
    }
    config.update(overrides)
    return config


def standin_policy(name: str, *options: str) -> dict[str, Any]:
    """A policy block of the stand-in policy server; `options` are its own (--action-dim 14, --noise 2)."""
    command = " ".join(["{python} -m benchmarks.standin.policy_server --port {port}", *options])
    return {"name": name, "command": command, "startup_timeout_s": 60}


def two_benchmark_config(results_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A campaign of two cheap benchmarks, each evaluated by its own policy: the stand-in (5 batches) and the RoboTwin
    stand-in checkout (one task, one setting, 4 episodes: 2 batches). `sections` change a section (a key given None
    is left out)."""
    config = standin_config(results_dir)
    del config["policy"]
    robotwin = yaml.safe_load((REPO / "config" / "robotwin-standin.yaml").read_text())["benchmarks"]["robotwin"]
    robotwin.update(tasks=["click_bell"], task_configs=["demo_clean"], instruction_types=["seen"])
    config["benchmarks"] = {
        "standin": {**config["benchmarks"]["standin"], "policy": standin_policy("standin-policy", "--action-dim 7")},
        "robotwin": {**robotwin, "policy": standin_policy("robotwin-policy", "--action-dim 14", "--noise 0.6")},
    }
    for name, changes in sections.items():
        section = config["benchmarks"][name]
        section.update(changes)
        for key in [key for key, value in changes.items() if value is None]:
            del section[key]
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_snakemake(
    workdir: Path, *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run snakemake on the repository's workflow with `workdir` as its working directory."""
    command = [*SNAKEMAKE, "--snakefile", str(SNAKEFILE), "--directory", str(workdir), *args]
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=workdir
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({completed.returncode}): {' '.join(command)}\n"
            f"--- stdout ---\n{completed.stdout[-4000:]}\n--- stderr ---\n{completed.stderr[-8000:]}"
        )
    return completed


@contextlib.contextmanager
def standin_server(*args: str) -> Iterator[str]:
    """A stand-in policy server started here, outside any worker (policy.url: an external policy); yields its URL
    once it answers the openpi handshake, terminates it on exit. `args`: extra server options (--noise 1.2)."""
    from evalwf.contract.loopback import free_port
    from evalwf.policy.client import check_endpoint

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.standin.policy_server", "--port", str(port), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"ws://127.0.0.1:{port}"
    try:
        check_endpoint(url, timeout_s=30)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def job_counts(dry_run_output: str) -> dict[str, int]:
    """Parse the 'Job stats' table that `snakemake -n` prints."""
    counts: dict[str, int] = {}
    lines = dry_run_output.splitlines()
    try:
        start = lines.index("Job stats:")
    except ValueError:
        return counts
    for line in lines[start + 3 :]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


@dataclass(frozen=True)
class FinishedRun:
    """A finished local-profile stand-in run: its working directory, config file and config."""

    workdir: Path
    configfile: Path
    config: dict[str, Any]

    @property
    def benchmark_dir(self) -> Path:
        return Path(self.config["results_dir"]) / self.config["run"] / "standin"

    def output(self) -> tuple[str, str]:
        """What snakemake printed while it ran the campaign: stdout, stderr."""
        return (self.workdir / "snakemake.stdout").read_text(), (self.workdir / "snakemake.stderr").read_text()


def finished_run_config(workdir: Path) -> dict[str, Any]:
    """The shape every reader of the shared finished run needs, and no more: three tasks (the report's 15/15
    episodes, two suites, a paper's figures to compare with), two batches per task (the gallery gathers failures
    across batches) and failures' videos (the gallery), short episodes."""
    section = {
        "suites": {"alpha": ["reach", "push"], "beta": ["open"]},
        "episodes_per_task": 5,
        "batch_size": 3,
        "max_steps": 15,
        "record_video": "failures",
    }
    reference = {"source": "made-up paper", "standin": {"alpha": 75.0, "beta": 10.0}}
    return standin_config(workdir, standin=section, reference=reference)


@pytest.fixture(scope="session")
def finished_standin_run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """One finished stand-in run per pytest run, for the tests that only read one (report, gallery): each built
    its own before. Under xdist the workers share it through a lock in their common temporary directory, so it is
    built once. A test must not change it: one that deletes or corrupts results runs its own."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-N/, above each worker's popen-gwN/
    workdir = shared / "finished-standin-run"
    config = finished_run_config(workdir)
    configfile = workdir / "campaign.yaml"
    with open(shared / "finished-standin-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        finished = workdir / ".finished"
        if not finished.exists():
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir()
            write_config(configfile, config)
            ran = run_snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile))
            (workdir / "snakemake.stdout").write_text(ran.stdout)
            (workdir / "snakemake.stderr").write_text(ran.stderr)
            finished.touch()
    return FinishedRun(workdir, configfile, config)


@pytest.fixture
def snakemake_runner() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_snakemake


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (make test), the slowest files first, so the run does not end on one core (tests/file_order.py)."""
    if hasattr(config, "workerinput"):
        order_by_expected_seconds(items, expected_seconds(items, recorded_seconds()))


_RECORDER = FileSecondsRecorder()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _RECORDER.add(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """EVALWF_RECORD_FILE_SECONDS=tests/file_seconds.json: record this run's seconds per file (in the process that
    saw every report: the xdist controller, or the only process)."""
    target = os.environ.get("EVALWF_RECORD_FILE_SECONDS")
    if target and not hasattr(session.config, "workerinput"):
        _RECORDER.write(Path(target))
