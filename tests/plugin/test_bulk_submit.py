"""Submitting and cancelling many tasks at once (real Labtasker server): every job submitted exactly once and
reported to Snakemake once, from Snakemake's thread; a Ctrl-C cancels every queued task, and a cancellation cut
short never leaves a queued task that a worker could claim later. Behaviour only, never timings."""
# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from labtasker_testkit import all_tasks, client, labtasker_url, queue
from test_submission import fake_job, spec_for, submit

from evalwf.contract import campaign_key
from snakemake_executor_plugin_labtasker import Executor
from snakemake_executor_plugin_labtasker.cancellation import PARKED_ROUTE, cancel_tasks, park_pending
from snakemake_executor_plugin_labtasker.policy_breaker import PolicyStops
from snakemake_executor_plugin_labtasker.progress import CampaignProgress
from snakemake_executor_plugin_labtasker.status_query import StatusPoller
from snakemake_executor_plugin_labtasker.submission import SUBMIT_THREADS, SubmissionStopped, SubmitPool

JOBS = 60


def _run_id() -> str:
    return f"r_{uuid.uuid4().hex[:12]}"


def _executor(client, workdir: Path) -> Executor:
    executor = Executor.__new__(Executor)
    executor._client = client
    executor.stops = PolicyStops(str(workdir), 2, warn=logging.getLogger("test-labtasker-executor").warning)
    executor.queue, executor.route, executor.scheduling = client._config.queue, "default", "longest-first"
    executor.workdir, executor.campaign, executor.started_at = str(workdir), campaign_key(str(workdir)), None
    executor.settings = SimpleNamespace(priority=0, max_attempts=1, cancel_running=False)
    executor._status, executor._missing_rounds, executor._query_errors = {}, {}, 0
    executor._cancelling, executor.keeper = False, None
    executor.poller = StatusPoller(executor.campaign)
    executor.progress = CampaignProgress()
    executor.logger = logging.getLogger("test-labtasker-executor")
    executor.get_snakefile = lambda: "workflow/Snakefile"
    executor.allowed = [str(workdir)]  # what its workers allow: the workflow directory, holding the Snakefile
    (workdir / "workflow").mkdir(parents=True, exist_ok=True)
    (workdir / "workflow" / "Snakefile").touch()
    executor.format_job_exec = lambda job: f"python -m snakemake --target {job.name} {job.output[0]}"
    executor._external_jobids = lambda job: []
    executor.run_job_pre = lambda job: None
    executor.reported, executor.errors = [], []
    executor.lock, executor.wait = threading.Lock(), True  # Snakemake's RemoteExecutor: status rounds run while wait
    main = threading.current_thread()

    def report(info):
        assert threading.current_thread() is main, "report_job_submission off Snakemake's thread"
        executor.reported.append(info)

    executor.report_job_submission = report
    executor.report_job_error = lambda info, msg=None, **kw: executor.errors.append(msg)
    return executor


def _jobs(workdir: Path, count: int) -> list[SimpleNamespace]:
    jobs = []
    for i in range(count):
        job = fake_job(workdir, f"{i:04d}-1")
        job.jobid = i
        job.resources = {"gpu": 1, "expected_cost_s": 10 + i}
        jobs.append(job)
    return jobs


def test_jobs_ready_together_are_each_submitted_once_and_reported_once(client, tmp_path):
    executor = _executor(client, tmp_path)
    jobs = _jobs(tmp_path, JOBS)
    executor.run_jobs(jobs)
    assert not executor.errors
    assert sorted(info.job.jobid for info in executor.reported) == list(range(JOBS)), "each job reported once"
    tasks = all_tasks(client)
    assert len(tasks) == JOBS and len({t.id for t in tasks}) == JOBS
    assert {info.external_jobid for info in executor.reported} == {t.id for t in tasks}
    assert sorted(t.priority for t in tasks) == [10 + i for i in range(JOBS)], "longest-first priorities kept"
    # handed over shortest first (the jobs' order), queued longest first: the first task the server holds is one of
    # the SUBMIT_THREADS longest, sent first, so that a waiting worker claims the longest at once
    first = min(tasks, key=lambda t: (t.created_at, -t.priority))
    assert first.priority >= 10 + JOBS - SUBMIT_THREADS, (first.priority, first.created_at)
    assert set(executor._status.values()) == {"pending"}
    # a second submitter of the same campaign (or a restart) finds the same tasks: nothing new
    again = _executor(client, tmp_path)
    again.run_jobs(_jobs(tmp_path, JOBS))
    assert len(all_tasks(client)) == JOBS and len(again.reported) == JOBS


def test_ctrl_c_cancels_every_queued_task_and_leaves_a_running_step_alone(client, tmp_path):
    executor = _executor(client, tmp_path)
    executor.run_jobs(_jobs(tmp_path, JOBS))
    claim = client._claim(route="default", run_id=_run_id())  # highest priority first
    client._report_progress(task_id=claim.task.id, run_id=claim.run_id, progress={"job_step": "started"})
    executor.cancel_jobs(list(executor.reported))
    statuses = {t.id: t.status for t in all_tasks(client)}
    assert statuses.pop(claim.task.id) == "running", "a started job step finishes (a rerun adopts it)"
    assert set(statuses.values()) == {"cancelled"} and len(statuses) == JOBS - 1
    assert client._claim(route="default", run_id=_run_id()) is None
    # status rounds stopped before the cancellation (they would compete with it; shutdown joins them at once)
    assert executor.wait is False


def test_a_cancellation_cut_short_leaves_nothing_a_worker_can_claim_and_a_rerun_restores_it(client, tmp_path):
    specs = [spec_for(tmp_path, f"{i:04d}-1") for i in range(5)]
    for spec in specs:
        submit(client, spec)
    # the first step of a cancellation, then a second Ctrl-C / kill before any task is cancelled
    assert park_pending(client, [s.task_id for s in specs], log=print) == 5
    assert {t.status for t in all_tasks(client)} == {"pending"}
    assert client._claim(route="default", run_id=_run_id()) is None, "a parked task was claimed"
    # rerunning the campaign gives the tasks back their route
    assert submit(client, specs[0]).action == "refreshed"
    assert client.get_task(specs[0].task_id).routes == ["default"]
    assert client._claim(route="default", run_id=_run_id()).task.id == specs[0].task_id
    # and a full cancellation completes: the parked ones and the claimed one whose job step has not started
    cancelled = cancel_tasks(client, [s.task_id for s in specs], "c", include_running=False, log=print)
    assert sorted(cancelled) == sorted(s.task_id for s in specs)
    assert {t.status for t in all_tasks(client)} == {"cancelled"}


def test_submit_pool_starts_nothing_after_stop_and_lets_calls_in_flight_finish():
    pool = SubmitPool(threads=4)
    started, finished = [], []
    gate = threading.Event()

    def call(item):
        started.append(item)
        gate.wait(5)
        time.sleep(0.05)
        finished.append(item)
        return item * 2

    results: list = []
    runner = threading.Thread(target=lambda: results.extend(pool.run(call, list(range(40)))))
    runner.start()
    deadline = time.monotonic() + 5
    while len(started) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    stopper = threading.Thread(target=pool.stop)
    stopper.start()
    time.sleep(0.1)
    gate.set()
    stopper.join(10)
    runner.join(10)
    assert sorted(finished) == sorted(started) and len(started) == 4, "only the calls in flight ran"
    done = {item: value for item, value, error in results if error is None}
    assert done == {item: item * 2 for item in started}
    assert all(isinstance(error, SubmissionStopped) for item, _, error in results if item not in done)
    assert len(results) == 40
    assert [error for _, _, error in pool.run(call, [1, 2])] and all(
        isinstance(e, SubmissionStopped) for _, _, e in pool.run(call, [1, 2])
    )
