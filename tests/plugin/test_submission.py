"""Task identity, idempotent submission and one-query status checks against a real Labtasker server."""
# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from labtasker_testkit import all_tasks, client, labtasker_url, queue, start_short_lease_server, wait_for

from evalwf.contract import ADOPT_RUN_METADATA, campaign_key
from evalwf.contract.loopback import free_port
from evalwf.policy.spec import PolicySpec
from evalwf.queue.endpoint import QueueEndpoint
from snakemake_executor_plugin_labtasker import Executor
from snakemake_executor_plugin_labtasker.policy_breaker import PolicyStops
from snakemake_executor_plugin_labtasker.progress import CampaignProgress
from snakemake_executor_plugin_labtasker.status_query import StatusPoller, failure_message, query_tasks
from snakemake_executor_plugin_labtasker.submission import submit_job_task
from snakemake_executor_plugin_labtasker.task_identity import build_task_spec
from snakemake_executor_plugin_labtasker.worker_refusals import WorkerRefusals

POLICY = {"name": "p", "command": "{python} -m benchmarks.standin.policy_server --port {port}", "env": {}}


def fake_job(workdir: Path, batch: str, *, attempt: int = 1, policy: dict | None = None) -> SimpleNamespace:
    wildcards = {"task": "reach", "batch": batch}
    return SimpleNamespace(
        is_group=lambda: False,
        name="evaluate_batch",
        rule=SimpleNamespace(name="evaluate_batch"),
        wildcards=SimpleNamespace(items=lambda: wildcards.items()),
        output=[f"results/batches/{batch}.json"],
        log=[f"results/logs/{batch}.log"],
        params=SimpleNamespace(
            policy=POLICY if policy is None else policy,
            policy_identity=PolicySpec.from_config(POLICY if policy is None else policy).identity,
        ),
        resources={"gpu": 1},
        attempt=attempt,
    )


def spec_for(workdir: Path, batch: str, command: str = "python -m snakemake --attempt 1", **kw):
    return build_task_spec(fake_job(workdir, batch, **kw), workdir=str(workdir), snakefile="Snakefile", command=command)


def submit(client, spec, resuming=False, started_at=None):
    return submit_job_task(
        client, spec, priority=0, max_attempts=1, routes=["default"], resuming=resuming, started_at=started_at
    )


def test_task_id_is_deterministic_and_depends_on_the_job_identity(tmp_path):
    a = spec_for(tmp_path, "0000-2")
    assert a.task_id == spec_for(tmp_path, "0000-2", command="python -m snakemake --attempt 2 other").task_id
    assert a.task_id.startswith("t_") and len(a.task_id) == 14
    assert a.task_id != spec_for(tmp_path, "0002-2").task_id
    assert a.task_id != spec_for(tmp_path / "other", "0000-2").task_id
    changed_policy = {**POLICY, "command": POLICY["command"] + " --noise 2"}
    assert a.task_id != spec_for(tmp_path, "0000-2", policy=changed_policy).task_id
    assert a.metadata["campaign"] == campaign_key(str(tmp_path))
    assert a.args["policy_identity"].startswith("p@")
    assert "token" not in repr(a.args).lower()


def test_same_campaign_submitted_twice_creates_no_new_tasks(client, tmp_path):
    specs = [spec_for(tmp_path, f"{i:04d}-2") for i in range(0, 10, 2)]
    first = [submit(client, s).action for s in specs]
    assert first == ["created"] * 5
    # a restarted snakemake: same jobs, different job step command (new temp dir, attempt)
    command = "python -m snakemake --attempt 1 --wait-for-files x"
    again = [spec_for(tmp_path, f"{i:04d}-2", command=command) for i in range(0, 10, 2)]
    second = [submit(client, s) for s in again]
    assert {s.action for s in second} == {"refreshed"}
    tasks = all_tasks(client)
    assert len(tasks) == 5
    assert {tuple(t.args["wait_for_files"]) for t in tasks} == {("x",)}


def _run_id() -> str:
    import secrets

    return f"r_{secrets.token_urlsafe(9)}"


def _claim_and_fail(client, task_id):
    claim = client._claim(route="default", run_id=_run_id())
    assert claim is not None and claim.task.id == task_id
    client._fail(task_id=task_id, run_id=claim.run_id, error_type="JobStepFailed", message="boom", traceback=None)


def test_retry_requeues_the_failed_task_instead_of_duplicating_it(client, tmp_path):
    spec = spec_for(tmp_path, "0000-2")
    submit(client, spec)
    _claim_and_fail(client, spec.task_id)
    failed = client.get_task(spec.task_id)
    assert failed.status == "failed"
    message = failure_message(failed, "q", [str(tmp_path / "missing.log")])
    assert spec.task_id in message and "JobStepFailed" in message and "boom" in message

    retry = spec_for(tmp_path, "0000-2", command="python -m snakemake --attempt 2")
    outcome = submit(client, retry)
    assert (outcome.action, outcome.status) == ("requeued", "pending")
    task = client.get_task(spec.task_id)
    assert task.attempt == 0 and task.args["attempt"] == 2
    assert len(all_tasks(client)) == 1


def test_succeeded_task_is_adopted_only_with_outputs_when_resuming_or_finished_during_this_run(client, tmp_path):
    spec = spec_for(tmp_path, "0000-2")
    submit(client, spec)
    claim = client._claim(route="default", run_id=_run_id())
    client._complete(task_id=spec.task_id, run_id=claim.run_id, result={})
    finished = client.get_task(spec.task_id).finished_at
    output = Path(spec.outputs[0])
    output.parent.mkdir(parents=True)
    output.write_text("{}")
    assert submit(client, spec, resuming=True).action == "adopted"
    # a second submitter that started before the task finished planned it while it ran: adopt, never rerun
    assert submit(client, spec, started_at=finished - timedelta(seconds=30)).action == "adopted"
    # snakemake wants the job rerun (forced: it finished before this submitter started; or outputs gone)
    outcome = submit(client, spec, started_at=finished + timedelta(seconds=30))
    assert (outcome.action, outcome.status) == ("recreated", "pending")
    assert not output.exists(), "a forced rerun's outputs are removed before its task is queued (a worker adopts them)"
    claim = client._claim(route="default", run_id=_run_id())
    client._complete(task_id=spec.task_id, run_id=claim.run_id, result={})
    outcome = submit(client, spec, resuming=True)
    assert (outcome.action, outcome.status) == ("recreated", "pending")
    assert len(all_tasks(client)) == 1


def test_outputs_of_a_job_snakemake_runs_again_are_removed_before_its_task_is_queued(client, tmp_path):
    """Workers adopt a task whose outputs exist and validate, so forcing is the submitter's decision: Snakemake
    scheduled the job although its outputs exist (forced, or a rerun trigger), so they go before the task does;
    outputs that are a task's standing result (running, finished during this run) are kept."""
    spec = spec_for(tmp_path, "0000-2")
    output = Path(spec.outputs[0])
    output.parent.mkdir(parents=True)
    output.write_text("{}")
    assert submit(client, spec).action == "created"
    assert not output.exists(), "forced without a task: its old output would be adopted by the worker"
    client._claim(route="default", run_id=_run_id())
    output.write_text("{}")  # the running job step wrote it: attached, kept
    assert submit(client, spec).action == "attached" and output.exists()


def test_running_task_is_attached(client, tmp_path):
    spec = spec_for(tmp_path, "0000-2")
    submit(client, spec)
    client._claim(route="default", run_id=_run_id())
    outcome = submit(client, spec_for(tmp_path, "0000-2", command="python -m snakemake --attempt 1 again"))
    assert (outcome.action, outcome.status) == ("attached", "running")


class CountingClient:
    def __init__(self, inner):
        self.inner, self.list_calls = inner, 0

    def list_tasks(self, **kwargs):
        self.list_calls += 1
        return self.inner.list_tasks(**kwargs)


def test_status_query_is_one_call_for_all_active_jobs_and_chunks_many(client, tmp_path, monkeypatch):
    specs = [spec_for(tmp_path, f"{i:04d}-1") for i in range(12)]
    for spec in specs:
        submit(client, spec)
    counting = CountingClient(client)
    found = query_tasks(counting, [s.task_id for s in specs], campaign_key(str(tmp_path)))
    assert set(found) == {s.task_id for s in specs} and counting.list_calls == 1
    # beyond the id filter's size: the ids in chunks, never the whole campaign
    import snakemake_executor_plugin_labtasker.status_query as status_query

    monkeypatch.setattr(status_query, "MAX_IDS_PER_FILTER", 5)
    counting = CountingClient(client)
    found = query_tasks(counting, [s.task_id for s in specs[:8]], campaign_key(str(tmp_path)))
    assert set(found) == {s.task_id for s in specs[:8]}
    assert counting.list_calls == 2  # 5 + 3 ids


def test_status_rounds_fetch_only_what_changed(client, tmp_path):
    """After a first look by id, a round downloads only the campaign's tasks updated since the previous one:
    nothing while nothing happens, whatever the campaign's size."""
    import time

    specs = [spec_for(tmp_path, f"{i:04d}-1") for i in range(6)]
    for spec in specs:
        submit(client, spec)
    ids = [s.task_id for s in specs]
    poller = StatusPoller(campaign_key(str(tmp_path)), overlap_s=0.3)
    time.sleep(0.6)  # longer than the overlap: the submissions are old news
    assert set(poller.poll(client, ids)) == set(ids) and poller.last_fetched == 6
    client.cancel_task(ids[2])
    state = poller.poll(client, ids)
    assert poller.last_fetched == 1 and state[ids[2]].status == "cancelled", "only the changed task comes back"
    assert state[ids[0]].status == "pending", "unchanged tasks keep their last known state"
    time.sleep(0.6)
    poller.poll(client, ids)  # may see the cancellation once more (it was within the overlap)
    poller.poll(client, ids)
    assert poller.last_fetched == 0, "an idle round downloads nothing, whatever the campaign's size"
    extra = spec_for(tmp_path, "0100-1")
    submit(client, extra)
    state = poller.poll(client, [*ids, extra.task_id])
    assert state[extra.task_id].status == "pending"
    client.delete_task(ids[4])
    poller.rounds = 0  # the next round reconciles by id, as every reconcile_every-th round does
    assert ids[4] not in poller.poll(client, [*ids, extra.task_id]), "a deleted task is found missing"


def _executor(client, workdir: Path) -> Executor:
    from throttler import Throttler

    executor = Executor.__new__(Executor)
    executor.stops = PolicyStops(str(workdir), 2, warn=logging.getLogger("test-labtasker-executor").warning)
    executor._client = client
    executor.queue, executor.campaign = "q", "c_x"
    executor._status, executor._missing_rounds, executor._query_errors = {}, {}, 0
    executor._cancelling, executor.keeper = False, None
    executor.poller = StatusPoller("c_x")
    executor.refusals = WorkerRefusals("c_x", "default")
    executor.settings = SimpleNamespace(no_worker_warning_s=0, url=None)  # the no-worker warning has its own test
    executor.url, executor.workdir = None, os.path.realpath(os.getcwd())
    executor.endpoint = QueueEndpoint(url="http://127.0.0.1:9")  # named in the status query's warnings
    executor._unclaimed_since, executor._workers_checked, executor._warned_no_worker = None, 0.0, float("-inf")
    executor.progress = CampaignProgress()
    executor.logger = logging.getLogger("test-labtasker-executor")
    executor.status_rate_limiter = Throttler(rate_limit=100, period=1)
    return executor


async def _collect(generator):
    return [item async for item in generator]


def test_check_active_jobs_never_raises_on_queue_errors(tmp_path):
    class Broken:
        def list_tasks(self, **kwargs):
            raise ConnectionError("queue down")

    executor = _executor(Broken(), tmp_path)
    jobs = [SimpleNamespace(external_jobid=f"t_{c * 12}", aux={}) for c in "ab"]
    assert asyncio.run(_collect(executor.check_active_jobs(jobs))) == jobs
    assert asyncio.run(_collect(executor.check_active_jobs(jobs))) == jobs


def test_check_active_jobs_reports_success_and_failure_with_task_id(client, tmp_path):
    specs = [spec_for(tmp_path, f"{i:04d}-1") for i in range(3)]
    for spec in specs:
        submit(client, spec)
    first = client._claim(route="default", run_id=_run_id())
    client._complete(task_id=first.task.id, run_id=first.run_id, result={"worker_log": "host:/w.log"})
    second = client._claim(route="default", run_id=_run_id())
    client._fail(
        task_id=second.task.id, run_id=second.run_id, error_type="JobStepFailed", message="boom", traceback=None
    )
    by_id = {s.task_id: s for s in specs}
    done, failed = by_id.pop(first.task.id), by_id.pop(second.task.id)
    (waiting,) = by_id.values()
    counting = CountingClient(client)
    executor = _executor(counting, tmp_path)
    successes, errors = [], []
    executor.report_job_success = successes.append
    executor.report_job_error = lambda job_info, msg=None, **kw: errors.append((job_info, msg))
    jobs = [SimpleNamespace(external_jobid=s.task_id, aux={"logs": s.logs}) for s in (done, failed, waiting)]
    still = asyncio.run(_collect(executor.check_active_jobs(jobs)))
    assert counting.list_calls == 1
    assert [j.external_jobid for j in successes] == [done.task_id]
    assert [j.external_jobid for j, _ in errors] == [failed.task_id]
    assert failed.task_id in errors[0][1] and "boom" in errors[0][1]
    assert [j.external_jobid for j in still] == [waiting.task_id]


def test_plugin_imports_without_importing_labtasker():
    code = "import sys, snakemake_executor_plugin_labtasker; assert 'labtasker' not in sys.modules, 'eager import'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("fstype, network", [("nfs4", True), ("lustre", True), ("ext4", False)])
def test_network_filesystems_are_detected(monkeypatch, tmp_path, fstype, network):
    import evalwf.queue.embedded_server as local_server

    workflow = tmp_path / "wf"
    workflow.mkdir()
    monkeypatch.setattr(
        local_server, "filesystem_type", lambda path: fstype if str(path).startswith(str(workflow)) else "ext4"
    )
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert local_server.is_network_filesystem(workflow) is network
    messages: list[str] = []
    root = local_server.embedded_root(workflow, log=messages.append)
    if network:
        assert root.is_relative_to(tmp_path / "state") and "network filesystem" in messages[0]
    else:
        assert root == workflow.resolve() / ".labtasker" and not messages


def test_the_policy_startup_timeout_changes_no_task_id(tmp_path):
    """The startup timeout is operational: a worker reads it from the campaign's config files, and a task carries
    only the rule's policy param (the policy's identity block), so a changed timeout finds the same tasks."""
    fast, slow = (PolicySpec.from_config({**POLICY, "startup_timeout_s": s}).identity_block() for s in (5, 900))
    assert spec_for(tmp_path, "0000-2", policy=fast).task_id == spec_for(tmp_path, "0000-2", policy=slow).task_id
    assert "policy" not in spec_for(tmp_path, "0000-2").args  # the worker takes the policy from the config files


def test_a_resumed_submitter_requeues_a_lost_report_for_adoption(tmp_path, queue):
    """A batch whose lease expired after its output was written (its report lost, its submitter killed meanwhile):
    the next submitter requeues it naming the lost run, so that a worker adopts that run instead of evaluating it
    again; a failure whose output is missing is requeued as a plain retry."""
    from labtasker import Client

    server, url = start_short_lease_server(tmp_path / "server", free_port(), lease_s=1)
    try:
        with Client(url=url, queue=queue) as client:
            client.create_queue(queue)
            lost, missing = spec_for(tmp_path, "0000-2"), spec_for(tmp_path, "0002-2")
            runs = {}
            for spec in (lost, missing):
                submit(client, spec)
                claim = client._claim(route="default", run_id=_run_id())
                runs[claim.task.id] = claim.run_id  # ... and no heartbeat, no report: the lease expires
            Path(lost.outputs[0]).parent.mkdir(parents=True)
            Path(lost.outputs[0]).write_text("{}")
            wait_for(lambda: {client.get_task(s.task_id).status for s in (lost, missing)} == {"failed"}, 30, "leases")
            for spec in (lost, missing):
                assert (submit(client, spec).action, client.get_task(spec.task_id).status) == ("requeued", "pending")
            assert client.get_task(lost.task_id).metadata[ADOPT_RUN_METADATA] == runs[lost.task_id]
            assert ADOPT_RUN_METADATA not in client.get_task(missing.task_id).metadata
    finally:
        server.kill()
        server.wait()


def test_a_status_query_refused_by_a_changed_certificate_names_the_change(tmp_path, caplog):
    """The submitter reached its server at start: a certificate it refuses mid-campaign (the proxy was given another
    CA's) is named as changed, not reported as Labtasker's "could not be reached" (for the worker, with a real TLS
    proxy: tests/worker/test_certificate_change.py)."""
    import ssl

    from labtasker import TransportError

    class ReplacedCertificate:
        def list_tasks(self, **kwargs):
            refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
            refused.verify_code, refused.verify_message = 20, "unable to get local issuer certificate"
            raise TransportError("The Labtasker Server could not be reached.") from refused

    executor = _executor(ReplacedCertificate(), tmp_path)
    jobs = [SimpleNamespace(external_jobid="t_" + "a" * 12, aux={})]
    with caplog.at_level(logging.WARNING, logger="test-labtasker-executor"):
        assert asyncio.run(_collect(executor.check_active_jobs(jobs))) == jobs
    (warning,) = [r.getMessage() for r in caplog.records if "status query failed" in r.getMessage()]
    assert "the TLS certificate of http://127.0.0.1:9 changed since this client connected" in warning, warning
    assert "could not be reached" not in warning, warning
