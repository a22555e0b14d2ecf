"""A failed job's cause travels as a structured record (evalwf.contract.failure), never parsed from a traceback:
from a simulator step in the benchmark's own interpreter to the job body, from the job body to its worker, and from
the task's error to what the submitter and `evalwf status` show first."""

from __future__ import annotations

import sys

import pytest

from evalwf.common.errors import SimulatorEnvError
from evalwf.contract.failure import CAUSE_FILE_ENV, excerpt, failure_text, read_cause
from evalwf.contract.failure_record import (
    FailureRecord,
    find_failure_records,
    last_lines,
    read_failure_record,
    record_path,
    write_failure_record,
)
from evalwf.job.interpreter import run_in_interpreter
from evalwf.policy.client import PolicyServerError
from evalwf.rules.jobs import JobFailed, logged_to, run_logged


def test_a_simulator_step_s_exception_becomes_the_job_s_first_words(tmp_path):
    """The step runs in another interpreter (here a real `python -m evalwf.job.sim_step` process); its exception
    comes back as the cause (which the job body reports as its own: next test), not only "exit status 1"."""
    output = tmp_path / "step.log"
    with open(output, "w") as stream, pytest.raises(SimulatorEnvError) as raised:
        run_in_interpreter(sys.executable, {"kind": "nope"}, lambda _: None, "batch x", stream=stream)
    cause = "ValueError: unknown request kind 'nope'; known: batch, manifest"
    assert raised.value.cause == cause
    assert str(raised.value).startswith(f"batch x failed in {sys.executable}: {cause}")
    assert "Traceback" in output.read_text(), "the traceback stays in the log"


def test_a_job_body_records_the_exception_it_fails_with_for_its_worker(tmp_path, monkeypatch):
    monkeypatch.setenv(CAUSE_FILE_ENV, str(tmp_path / "cause.json"))
    with pytest.raises(SimulatorEnvError), logged_to(str(tmp_path / "job.log")):
        raise SimulatorEnvError("ValueError: bad shape (batch failed in python)", cause="ValueError: bad shape")
    assert read_cause(tmp_path / "cause.json") == "ValueError: bad shape"
    with pytest.raises(KeyError), logged_to(str(tmp_path / "job.log")):
        raise KeyError("suite")
    assert read_cause(tmp_path / "cause.json") == "KeyError: 'suite'"
    assert read_cause(tmp_path / "never-written.json") is None


def test_a_job_body_s_own_error_is_reported_by_its_message_alone(tmp_path):
    """Snakemake prints the frames of a failed run: block after its message: an error of the
    project's own reaches it as JobFailed, which Snakemake's own formatter prints without them; the job's log keeps
    the traceback."""
    from snakemake.exceptions import format_exception_to_string

    def body() -> None:
        raise PolicyServerError("policy server exited with status 3 during startup; log /x/server.log")

    with pytest.raises(JobFailed) as raised:
        run_logged(str(tmp_path / "job.log"), body)
    shown = format_exception_to_string(raised.value, {})
    assert "PolicyServerError: policy server exited with status 3 during startup; log /x/server.log" in shown
    assert 'File "' not in shown and "Traceback" not in shown, shown
    log = (tmp_path / "job.log").read_text()
    assert "Traceback (most recent call last)" in log and "in body" in log, "the log keeps where it came from"
    with pytest.raises(KeyError):  # a bug is not the project's word: it keeps its traceback
        run_logged(str(tmp_path / "job.log"), dict().__getitem__, "suite")


def test_a_target_the_config_does_not_plan_is_refused_by_its_message_alone(tmp_path):
    """D7: a job naming a batch or manifest outside the config's plan (a crafted task, a changed config) is the
    project's own refusal: its message, no frames of the job body."""
    from conftest import standin_config
    from snakemake.exceptions import format_exception_to_string

    from evalwf.plan.campaign import Campaign
    from evalwf.plan.config import validate_config
    from evalwf.rules.jobs import evaluate_batch, seal_task_manifest

    campaign = Campaign(validate_config(standin_config(tmp_path)))
    [member] = campaign.policy_campaigns()
    for body, target in ((evaluate_batch, "nowhere/0000-2.json"), (seal_task_manifest, "nowhere/m.json")):
        with pytest.raises(JobFailed) as raised:
            run_logged(str(tmp_path / "job.log"), body, member if body is evaluate_batch else campaign, target)
        shown = format_exception_to_string(raised.value, {})
        assert f"{target} is not planned by this config" in shown and 'File "' not in shown, shown


def test_the_job_log_s_own_traceback_comes_after_its_failed_line(tmp_path):
    """The policy breaker reads a failure's cause from the traceback printed before the FAILED line (the simulator
    step's, the root cause): the job body's own traceback, kept in the log too, must not come in between."""
    from evalwf.worker.policy_breaker import failure_cause

    def body() -> None:
        print("Traceback (most recent call last):", file=sys.stderr)
        print("ValueError: actions of shape (7,), expected (10, 7)", file=sys.stderr)
        raise SimulatorEnvError("batch failed in python: ValueError: actions of shape (7,), expected (10, 7)")

    with pytest.raises(JobFailed):
        run_logged(str(tmp_path / "job.log"), body)
    log = (tmp_path / "job.log").read_text()
    assert failure_cause(log) == "ValueError: actions of shape (7,), expected (10, 7)", log
    assert "in body" in log


def test_what_the_submitter_and_status_show_first():
    worker = failure_text("ValueError: bad shape", "node1:/wf/.snakemake/labtasker/tasks/t_x/r_1.log", "exit 1 on w")
    assert excerpt("JobStepFailed", worker) == (
        "ValueError: bad shape",
        "node1:/wf/.snakemake/labtasker/tasks/t_x/r_1.log",
        "exit 1 on w",
    )
    # Labtasker's own errors and the worker's other reports: their type, then their first line
    assert excerpt("HeartbeatTimeout", "Heartbeat lease expired.") == (
        "HeartbeatTimeout: Heartbeat lease expired.",
        None,
        "",
    )
    assert (
        excerpt("TaskRefused", "worker w: config file x is not a file\nmore").cause
        == "TaskRefused: worker w: config file x is not a file"
    )


def test_a_failure_record_is_kept_beside_the_result_out_of_every_result_glob(tmp_path):
    """The record a worker writes under results/ (evalwf.contract.failure_record): read back whole, found by its
    task id, never taken for a batch result (`<task>/*.json`), and a damaged one reads as none."""
    output = tmp_path / "results" / "r" / "standin" / "batches" / "alpha" / "reach" / "0000-2.json"
    record = FailureRecord("ValueError: bad", "t_abc", "labtasker 1/1", "h-gpu0-p1", "h:/x.log", "a\nb", "2026")
    assert write_failure_record([str(output)], record) == []
    assert read_failure_record(output) == record
    assert list(output.parent.glob("*.json")) == [] and not output.exists()
    assert list(output.parents[2].rglob("*.json")) == [], "not even a recursive glob takes a record for a result"
    assert find_failure_records(tmp_path / "results", "t_abc") == [(record_path(output), record)]
    assert find_failure_records(tmp_path / "results", "t_other") == []
    record_path(output).write_text("{not json")
    assert read_failure_record(output) is None
    assert last_lines("\n".join(map(str, range(100))), lines=3) == "97\n98\n99"
