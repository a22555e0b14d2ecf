"""The stand-in benchmark and policy server: deterministic, batch-size independent, openpi wire compatible."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
from benchkit import campaign_config, evaluate_campaign, leaves_caller_rngs_alone, records_by_batch_size, served_policy

from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.policy.client import PolicyClient, PolicyServerError
from evalwf.policy.spec import PolicySpec

POLICY = {
    "name": "standin-policy",
    "command": "{python} -m benchmarks.standin.policy_server --port {port} --noise 1.2",
    "startup_timeout_s": 60,
}
SECTION = {"episodes_per_task": 6, "max_steps": 30, "suites": {"alpha": ["reach", "stack"]}}


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory):
    with served_policy(POLICY, tmp_path_factory.mktemp("logs")) as server:
        yield server


def test_records_identical_for_batch_size_1_5_whole_task_and_auto(tmp_path, policy_server):
    by_size = records_by_batch_size(tmp_path, "standin", SECTION, POLICY, policy_server.endpoint, sizes=(1, 5, 6))
    assert by_size[1] == by_size[5] == by_size[6]
    auto = campaign_config(tmp_path / "auto", "standin", {**SECTION, "batch_size": {"auto": {"workers": 2}}}, POLICY)
    sizes = [batch.episodes.count for batch in Campaign(validate_config(auto)).single().batches()]
    assert sizes == [3, 2, 1] * 2, "auto sizes of different lengths, large first"
    assert evaluate_campaign(auto, policy_server.endpoint) == by_size[1]
    assert len(by_size[1]) == 12
    outcomes = {r["success"] for r in by_size[1].values()}
    assert outcomes == {True, False}, "the stand-in should produce both outcomes for a meaningful test"


def test_evaluation_leaves_caller_rng_alone(tmp_path, policy_server):
    def evaluate() -> None:
        section = {**SECTION, "episodes_per_task": 2, "batch_size": 2}
        evaluate_campaign(campaign_config(tmp_path, "standin", section, POLICY), policy_server.endpoint)

    assert leaves_caller_rngs_alone(evaluate)


def test_policy_server_is_deterministic_and_speaks_openpi(policy_server):
    openpi = pytest.importorskip("openpi_client.websocket_client_policy")
    host, port = "127.0.0.1", policy_server.port
    observation = {
        "observation/state": np.arange(4, dtype=np.float32),
        "observation/goal": np.ones(4, np.float32),
        "observation/image": np.zeros((8, 8, 3), np.uint8),
        "prompt": "reach",
    }
    reference = openpi.WebsocketClientPolicy(host, port)
    assert reference.get_server_metadata()["server"] == "standin-policy"
    theirs = reference.infer(observation)["actions"]
    with PolicyClient(policy_server.endpoint) as ours:
        mine = ours.infer(observation)["actions"]
    assert theirs.shape == (10, 7) and theirs.dtype == np.float32
    np.testing.assert_array_equal(theirs, mine)


def test_server_error_comes_back_as_clear_error(policy_server):
    with PolicyClient(policy_server.endpoint) as client, pytest.raises(PolicyServerError, match="failed during"):
        client.infer({"observation/state": np.zeros(3, np.float32), "observation/goal": "not-an-array"})


def test_connect_gives_up_after_bounded_time():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PolicyServerError, match="cannot connect"):
        PolicyClient(f"ws://127.0.0.1:{port}", connect_timeout_s=1.0)


def test_infer_times_out_on_a_silent_server():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    threading.Thread(target=lambda: listener.accept(), daemon=True).start()
    with pytest.raises(PolicyServerError):
        PolicyClient(f"ws://127.0.0.1:{port}", connect_timeout_s=1.5)
    listener.close()


def test_policy_identity_changes_with_what_the_policy_computes():
    spec = PolicySpec.from_config(POLICY)
    assert spec.identity == PolicySpec.from_config({**POLICY, "startup_timeout_s": 5}).identity
    assert spec.identity != PolicySpec.from_config({**POLICY, "checkpoint": "/ckpt/2"}).identity
