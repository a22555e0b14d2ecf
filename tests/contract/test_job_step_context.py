"""What a worker tells its job step travels as one typed object (evalwf.contract.job_step_context): the policy
server it leased and where the job body says why it failed; the job step checks the identity in one place."""

from __future__ import annotations

import json

import pytest

from evalwf.contract.job_step_context import JOB_STEP_CONTEXT_ENV, JobStepContext

CONTEXT = JobStepContext(policy_identity="p-1", endpoint="ws://127.0.0.1:9", server_process="12:34", cause_file="/c")


def test_the_context_comes_back_from_the_one_variable_it_travels_in():
    env = CONTEXT.to_env()
    assert list(env) == [JOB_STEP_CONTEXT_ENV]
    assert JobStepContext.from_environ(env) == CONTEXT
    assert JobStepContext.from_environ({}) is None  # outside a worker: none
    only_cause = JobStepContext(cause_file="/c")  # a job that evaluates no policy
    assert JobStepContext.from_environ(only_cause.to_env()) == only_cause


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("not json", "is not JSON"),
        ("[1]", "must be a JSON object"),
        (json.dumps({"endpoint": 9}), "field 'endpoint'"),
        (json.dumps({"identity": "p"}), "unknown field(s) 'identity'"),
        # an endpoint without the identity it serves would pass the job step's check unchecked
        (json.dumps({"endpoint": "ws://127.0.0.1:9", "server_process": "1:2"}), "field 'policy_identity' is missing"),
    ],
)
def test_a_malformed_context_is_refused_naming_the_variable_and_the_field(text, named):
    with pytest.raises(ValueError) as raised:
        JobStepContext.from_environ({JOB_STEP_CONTEXT_ENV: text})
    assert JOB_STEP_CONTEXT_ENV in str(raised.value) and named in str(raised.value)


def test_a_server_of_another_policy_is_refused_and_no_server_is_no_refusal():
    refusal = CONTEXT.serving("p-2")
    assert refusal is not None and "serves p-1" in refusal and "needs p-2" in refusal
    assert CONTEXT.serving("p-1") is None
    assert JobStepContext(cause_file="/c").serving("p-2") is None  # the worker leased no server: the batch starts one


def test_a_job_body_refuses_the_worker_s_server_of_another_policy_before_anything(tmp_path, monkeypatch):
    """The one check on the job step's side (evalwf.rules.jobs.policy_endpoint): no endpoint is handed out."""
    from conftest import standin_config

    from evalwf.plan.campaign import Campaign
    from evalwf.plan.config import validate_config
    from evalwf.policy.client import PolicyServerError
    from evalwf.rules.jobs import policy_endpoint

    campaign = Campaign(validate_config(standin_config(tmp_path))).single()
    other = JobStepContext(policy_identity="other-policy", endpoint="ws://127.0.0.1:9", server_process="1:2")
    monkeypatch.setenv(JOB_STEP_CONTEXT_ENV, other.to_env()[JOB_STEP_CONTEXT_ENV])
    needs = f"serves other-policy, but this batch needs {campaign.policy.identity}"
    with pytest.raises(PolicyServerError, match=needs), policy_endpoint(campaign, tmp_path / "logs"):
        pass
    ours = JobStepContext(policy_identity=campaign.policy.identity, endpoint="ws://127.0.0.1:9", server_process="1:2")
    monkeypatch.setenv(JOB_STEP_CONTEXT_ENV, ours.to_env()[JOB_STEP_CONTEXT_ENV])
    with policy_endpoint(campaign, tmp_path / "logs") as handed:
        assert handed == ("ws://127.0.0.1:9", None, "1:2")


def test_the_worker_hands_its_job_step_its_context_and_no_stale_one(monkeypatch):
    """evalwf.worker.task_run: the job step's environment holds the context of this step, not one the worker itself
    inherited, and none of the worker's queue secrets."""
    from types import SimpleNamespace

    from evalwf.worker.task_run import NOT_INHERITED, TaskRun

    monkeypatch.setenv(
        JOB_STEP_CONTEXT_ENV, JobStepContext("p-0", endpoint="ws://stale:1").to_env()[JOB_STEP_CONTEXT_ENV]
    )
    for key in NOT_INHERITED:
        monkeypatch.setenv(key, "secret")
    worker = SimpleNamespace(gpu="3", worker_id="w", slots=1)
    env = TaskRun._job_env(worker, "task-1", CONTEXT)  # type: ignore[arg-type]
    assert JobStepContext.from_environ(env) == CONTEXT and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert not set(NOT_INHERITED) & set(env)
    assert JobStepContext.from_environ(TaskRun._job_env(worker, "task-1", JobStepContext())) == JobStepContext()  # type: ignore[arg-type]
