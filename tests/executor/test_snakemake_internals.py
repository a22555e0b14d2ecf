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
