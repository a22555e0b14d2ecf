"""The job step sends no observation to a process that merely holds the policy port (DESIGN invariants 5 and 6):
the worker's server dies, a stranger binds the same port, and the batch fails naming why, with nothing recorded."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import standin_config
from policy_stranger import stranger_on

from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.policy.client import ENDPOINT_ENV, IDENTITY_ENV, PolicyClient, PolicyServerError
from evalwf.policy.peer import SERVER_PROCESS_ENV, process_identity
from evalwf.policy.spec import PolicySpec
from evalwf.rules import jobs
from evalwf.worker.policy_server import GuardedPolicyServer

POLICY = {"name": "standin-policy", "command": "{python} -m benchmarks.standin.policy_server --port {port}"}


@pytest.fixture
def dead_server(tmp_path):
    """(endpoint, process identity) of a worker's policy server that answered, then died."""
    server = GuardedPolicyServer(log_dir=tmp_path / "logs")
    endpoint = server.ensure(PolicySpec.from_config(POLICY))
    identity = server.process_identity
    assert identity is not None
    PolicyClient(endpoint, server_process=identity).close()  # its own server passes the check
    server.stop()
    return endpoint, identity


def test_a_stranger_on_the_dead_server_s_port_gets_no_observation_and_the_batch_fails(
    tmp_path, dead_server, monkeypatch
):
    endpoint, identity = dead_server
    received = tmp_path / "received"
    stranger = stranger_on(int(endpoint.rsplit(":", 1)[1]), received)
    try:
        with PolicyClient(endpoint) as unchecked:  # what a client without the check would believe
            assert unchecked.metadata == {"stranger": True}
        campaign = Campaign(validate_config(standin_config(tmp_path, policy=POLICY))).single()
        plan = campaign.tasks[0]
        jobs.seal_task_manifest(campaign, plan.manifest_path)
        monkeypatch.setenv(ENDPOINT_ENV, endpoint)  # what the worker hands its job step
        monkeypatch.setenv(IDENTITY_ENV, campaign.policy.identity)
        monkeypatch.setenv(SERVER_PROCESS_ENV, identity)
        batch = plan.batches[0]
        with pytest.raises(PolicyServerError, match=r"is not the one this worker started .*: no observation sent"):
            jobs.evaluate_batch(campaign, batch.path)
        assert not received.exists(), "an observation reached the stranger"
        assert not Path(batch.path).exists(), "a batch was recorded from a stranger's actions"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_live_process_that_does_not_hold_the_port_is_not_the_server(tmp_path, dead_server):
    """The process named is alive, but another one answers on the port: refused all the same."""
    endpoint, _ = dead_server
    bystander = subprocess.Popen(["sleep", "60"])
    stranger = stranger_on(int(endpoint.rsplit(":", 1)[1]), tmp_path / "received")
    try:
        with pytest.raises(PolicyServerError, match="the answering socket belongs to another process"):
            PolicyClient(endpoint, server_process=process_identity(bystander.pid))
        assert not (tmp_path / "received").exists()
    finally:
        for process in (stranger, bystander):
            process.kill()
            process.wait()
