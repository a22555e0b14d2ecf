"""The worker calls Labtasker's private run-protocol methods (evalwf/worker/queue_client.py): pin their
signatures, so that a Labtasker upgrade that changes them fails here instead of in every worker."""

from __future__ import annotations

import inspect

import labtasker
import pytest

from evalwf.worker import queue_client

EXPECTED = {
    "_claim": {"route", "run_id"},
    "_heartbeat": {"task_id", "run_id"},
    "_report_progress": {"task_id", "run_id", "progress"},
    "_complete": {"task_id", "run_id", "result"},
    "_fail": {"task_id", "run_id", "error_type", "message", "traceback"},
    "_unclaim": {"task_id", "run_id"},
}


def test_pinned_labtasker_version():
    assert labtasker.__version__ == "2.8.0", "queue_client.py was checked against Labtasker 2.8.0 only"


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_private_method_takes_the_keywords_queue_client_passes(method):
    signature = inspect.signature(getattr(labtasker.Client, method))
    keywords = {name for name, p in signature.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert EXPECTED[method] <= keywords, f"labtasker.Client.{method}{signature} changed"


def test_queue_client_uses_only_the_pinned_methods():
    source = inspect.getsource(queue_client)
    used = {name for name in EXPECTED if f"client.{name}(" in source}
    assert used == set(EXPECTED)


def test_worker_registration_uses_labtasker_s_observation_reporter(tmp_path):
    """queue_client.observe_worker builds labtasker.observations.ObservationReporter(configuration, route,
    metadata) from the client's private _configuration; the reporter must still be a context manager with
    .id and .activity(task_id)."""
    from labtasker.observations import ObservationReporter

    parameters = list(inspect.signature(ObservationReporter.__init__).parameters)
    assert parameters[:4] == ["self", "configuration", "route", "metadata"], parameters
    assert all(hasattr(ObservationReporter, name) for name in ("__enter__", "__exit__", "activity"))
    with labtasker.Client(url="http://127.0.0.1:9", queue="q") as client:
        reporter = queue_client.observe_worker(client, route="default", metadata={"gpu": "0"})
    assert isinstance(reporter, ObservationReporter) and reporter.id.startswith("w_")
