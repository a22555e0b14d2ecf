"""The executor relies on one internal Snakemake API, `Persistence.external_jobids(job)`: the ids of the tasks a
job's incomplete markers name (a killed submitter's rerun adopts them). Pin it, so that an upgrade that drops or
changes it fails here instead of silently turning resumes into delete-and-rerun. Also pinned: the
RemoteExecutor's `lock` / `wait` pair, which Ctrl-C clears to stop status rounds before cancelling."""

from __future__ import annotations

import inspect

import snakemake
from snakemake.persistence import PersistenceBase as Persistence


def test_pinned_snakemake_version():
    assert snakemake.__version__ == "9.27.1", "the executor was checked against Snakemake 9.27.1 only"


def test_external_jobids_takes_a_job_and_returns_the_recorded_ids():
    signature = inspect.signature(Persistence.external_jobids)
    assert list(signature.parameters) == ["self", "job"], f"Persistence.external_jobids{signature} changed"
    source = inspect.getsource(Persistence.external_jobids)
    assert "_get_external_jobids" in source, "it must read the external job ids recorded with the incomplete markers"


def test_status_rounds_stop_when_wait_is_cleared_under_the_lock():
    from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

    rounds = inspect.getsource(RemoteExecutor._wait_for_jobs)
    assert "async_lock(self.lock)" in rounds and "if not self.wait:" in rounds, "the status loop's stop flag changed"
    assert "self.wait = False" in inspect.getsource(RemoteExecutor.shutdown)


def test_a_job_failed_with_its_attempts_used_up_is_not_restarted():
    """A job of a policy stopped by its circuit breaker is failed without an error block of its own (the second
    half of report_job_error) and with its attempt set past its restarts, so that --retries resubmits nothing."""
    from snakemake.scheduling.job_scheduler import JobScheduler
    from snakemake_interface_executor_plugins.executors.base import AbstractExecutor

    report = inspect.getsource(AbstractExecutor.report_job_error)
    assert "self.print_job_error(" in report and "self.workflow.scheduler.error_callback(job_info.job)" in report
    assert "if job.restart_times > job.attempt - 1:" in inspect.getsource(JobScheduler._handle_error)
