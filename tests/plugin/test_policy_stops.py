"""The submitter's side of the per-policy circuit breaker: a submission begins a new generation and names what the
previous one stopped; a breaker the workers opened is found once; a stopped policy's queued tasks are cancelled on
a real Labtasker server with the reason recorded, its finished ones are quiet; the one message says what, why,
where and what now. The whole path: tests/plugin/test_policy_breaker.py."""
# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)

from __future__ import annotations

import threading
from types import SimpleNamespace

from labtasker_testkit import client, labtasker_url, queue

from evalwf.queue.breaker import Holder, PolicyBreaker, current_generation
from evalwf.report.run_state import _error_text
from snakemake_executor_plugin_labtasker.cancellation import PARKED_ROUTE
from snakemake_executor_plugin_labtasker.policy_breaker import PolicyStops, queued_of, stop_message, stop_queued_tasks

FAILURE = {"reason": "policy server exited with status 3 during startup", "log": "gpu7:/w/p-2.log", "detail": "a\nb"}


def open_start_breaker(workdir, identity: str = "p@1") -> None:
    state = PolicyBreaker(workdir, identity, "d", current_generation(workdir))
    for _ in range(state.max_failures):
        state.acquire_start(Holder.this_process("w"), 60, threading.Event()).failed(FAILURE)


def test_a_breaker_the_workers_opened_is_found_once_and_its_tasks_are_quiet(tmp_path):
    warnings: list[str] = []
    stops = PolicyStops(str(tmp_path), 2, warn=warnings.append)
    assert warnings == [] and stops.newly_stopped() == {}
    open_start_breaker(tmp_path)
    (record,) = stops.newly_stopped().values()
    assert record.identity == "p@1" and stops.newly_stopped() == {} and stops.is_stopped("p@1")

    def task(status: str, error: str | None = None) -> SimpleNamespace:
        return SimpleNamespace(status=status, last_error=SimpleNamespace(type=error) if error else None)

    assert stops.quiet("p@1", task("pending")) and stops.quiet("p@1", task("cancelled"))
    assert stops.quiet("p@1", task("failed", "PolicyServerError"))
    assert stops.quiet("p@1", task("failed", "PolicyCircuitOpen"))
    assert not stops.quiet("p@1", task("failed", "JobStepFailed")), "another reason is reported as usual"
    assert not stops.quiet("p@1", task("running")) and not stops.quiet("other@1", task("pending"))

    # the next submission names it first, then tries it again with a fresh breaker
    again = PolicyStops(str(tmp_path), 1, warn=warnings.append)
    (warning,) = warnings
    assert "the previous submission in this directory stopped policy p@1" in warning
    assert "exited with status 3" in warning and "gpu7:/w/p-2.log" in warning and "at most 1 more" in warning
    assert again.newly_stopped() == {} and current_generation(tmp_path).max_failures == 1


def test_with_the_breaker_off_nothing_is_stopped(tmp_path):
    stops = PolicyStops(str(tmp_path), 0, warn=lambda _: None)
    open_start_breaker(tmp_path)  # (with 0, no worker writes one: nothing is read either)
    assert stops.newly_stopped() == {} and not stops.is_stopped("p@1")


def test_the_one_message_says_what_why_where_and_what_now(tmp_path):
    stops = PolicyStops(str(tmp_path), 2, warn=lambda _: None)
    open_start_breaker(tmp_path, "crashes@abc")
    (record,) = stops.newly_stopped().values()
    message = stop_message(record, 5)
    first = message.splitlines()[0]
    assert "policy crashes@abc is stopped for this submission" in first and "--labtasker-policy-breaker 2" in first
    assert "failed to start 2 time(s)" in first and FAILURE["reason"] in first and "log gpu7:/w/p-2.log" in first
    assert "    | a\n    | b" in message, "the end of the log"
    assert "5 queued task(s) cancelled" in message and "the other policies go on" in message
    assert "rerun the same command" in message


def test_a_stopped_policy_s_queued_tasks_are_cancelled_with_the_reason(client, tmp_path):
    tasks = [client.submit_task({"n": n}, name=f"b{n}", routes=["default"]) for n in range(3)]
    running = client._claim(route="default", run_id="r_claimedbywkr")
    stops = PolicyStops(str(tmp_path), 2, warn=lambda _: None)
    open_start_breaker(tmp_path)
    (record,) = stops.newly_stopped().values()
    jobs = [SimpleNamespace(external_jobid=t.id, aux={"policy_identity": "p@1"}) for t in tasks]
    states = {t.id: client.get_task(t.id) for t in tasks}
    queued = queued_of("p@1", jobs, states)
    assert running.task.id not in queued and len(queued) == 2
    assert queued_of("other@1", jobs, states) == []
    logged: list[str] = []
    cancelled = stop_queued_tasks(client, queued[:1], record, log=logged.append)
    assert cancelled == queued[:1] and logged == [], "no line of its own: the one message says it"
    stopped = client.get_task(queued[0])
    assert stopped.status == "cancelled" and stopped.routes == [PARKED_ROUTE]
    assert stopped.result["stopped_by"] == "policy circuit breaker" and "p@1" in stopped.result["reason"]
    assert _error_text(stopped).startswith("policy p@1 is stopped for this submission"), "what `status` shows"
    assert client.get_task(queued[1]).status == "pending" and client.get_task(running.task.id).status == "running"
