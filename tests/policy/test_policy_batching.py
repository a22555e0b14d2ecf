"""Batched serving (evalwf.policy.serving): concurrent requests of several connections reach one
infer_batch call, every reply goes back to its own connection in order, and a failing request fails only itself."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from evalwf.contract.loopback import free_port
from evalwf.policy.client import PolicyClient, PolicyServerError
from evalwf.policy.serving import serve_policy
from evalwf.policy.template import PredictAdapter


class RecordingPolicy:
    """Echoes each request's `id` back; records the size of every infer_batch call; fails on `fail`."""

    def __init__(self, forward_s: float = 0.0):
        self.batches: list[list[int]] = []
        self.singles = 0
        self.forward_s = forward_s
        self.lock = threading.Lock()

    def _answer(self, observation: dict[str, Any]) -> dict[str, Any]:
        if observation.get("fail"):
            raise RuntimeError(f"request {observation['id']} is broken")
        return {"actions": np.full((2, 3), float(observation["id"]), np.float32), "id": observation["id"]}

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.singles += 1
        return self._answer(observation)

    def infer_batch(self, observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with self.lock:
            self.batches.append([int(o["id"]) for o in observations])
        time.sleep(self.forward_s)
        return [self._answer(o) for o in observations]


@contextlib.contextmanager
def running(policy: Any, **batching: Any) -> Iterator[str]:
    """`policy` served on a loopback port from a thread of this process; yields the endpoint."""
    port = free_port()
    loop = asyncio.new_event_loop()
    task: list[asyncio.Task] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        task.append(loop.create_task(serve_policy(policy, "127.0.0.1", port, {"server": "test"}, "up", **batching)))
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(task[0].cancel)
        thread.join(10)


def concurrently(endpoint: str, requests: list[dict[str, Any]], rounds: int = 1) -> list[Any]:
    """One connection per request, all sent at once (as K job slots do), `rounds` times in a row (slots stepping
    their simulators); the last reply (or the error) of each."""
    clients = [PolicyClient(endpoint, connect_timeout_s=10) for _ in requests]
    results: list[Any] = [None] * len(requests)
    barrier = threading.Barrier(len(requests))

    def send(index: int) -> None:
        for _ in range(rounds):
            try:
                barrier.wait()  # every slot asks again once all have their answers (they step in lockstep here)
            except threading.BrokenBarrierError:  # another slot's request failed
                return
            try:
                results[index] = clients[index].infer(requests[index])
            except PolicyServerError as error:
                results[index] = error
                barrier.abort()  # the others stop waiting for this slot
                return

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for client in clients:
        client.close()
    return results


def test_concurrent_requests_arrive_as_one_batch_and_replies_go_to_their_connection():
    policy = RecordingPolicy(forward_s=0.05)
    # the first round may wait its max_wait_ms out (a slot answered alone waits at the barrier for the others,
    # which wait for it): long enough for any load to gather 4 requests, short for the test
    with running(policy, max_batch=8, max_wait_ms=2000) as endpoint:
        replies = concurrently(endpoint, [{"id": i} for i in range(4)], rounds=5)
    assert [r["id"] for r in replies] == [0, 1, 2, 3]
    assert [float(r["actions"][0, 0]) for r in replies] == [0.0, 1.0, 2.0, 3.0]
    assert [0, 1, 2, 3] in [sorted(batch) for batch in policy.batches], policy.batches
    assert sorted(policy.batches[-1]) == [0, 1, 2, 3], "slots that came back together stay in one batch"
    assert sum(map(len, policy.batches)) == 20 and policy.singles == 0
    assert replies[0]["server_timing"]["batch_size"] == 4
    closed_by = {r["server_timing"]["closed_by"] for r in replies}
    assert closed_by == {"all_expected"}, f"the last batch closed by {closed_by}, not once every connection was in"


def test_max_batch_bounds_a_batch_and_sequential_requests_stay_in_order():
    policy = RecordingPolicy(forward_s=0.05)
    with running(policy, max_batch=3, max_wait_ms=200) as endpoint:
        replies = concurrently(endpoint, [{"id": i} for i in range(6)])
        with PolicyClient(endpoint) as client:
            sequence = [client.infer({"id": 100 + i})["id"] for i in range(5)]
    assert [r["id"] for r in replies] == list(range(6))
    assert max(len(batch) for batch in policy.batches) == 3
    assert sequence == [100, 101, 102, 103, 104]


def test_a_failing_request_fails_only_its_own_connection():
    policy = RecordingPolicy()
    with running(policy, max_batch=4, max_wait_ms=2000) as endpoint:
        results = concurrently(endpoint, [{"id": 0}, {"id": 1, "fail": True}, {"id": 2}, {"id": 3}])
        with PolicyClient(endpoint) as client:  # the server goes on serving
            after = client.infer({"id": 9})["id"]
    assert isinstance(results[1], PolicyServerError)
    assert "request 1 is broken" in str(results[1])
    assert [results[i]["id"] for i in (0, 2, 3)] == [0, 2, 3]
    assert after == 9


def test_without_infer_batch_or_with_max_batch_1_each_request_is_answered_alone():
    class Single:
        def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
            return {"actions": np.zeros((1, 1), np.float32), "id": observation["id"]}

    with running(Single(), max_batch=8, max_wait_ms=50) as endpoint:
        replies = concurrently(endpoint, [{"id": i} for i in range(3)])
    assert [r["id"] for r in replies] == [0, 1, 2]
    assert {r["server_timing"]["batch_size"] for r in replies} == {1}
    policy = RecordingPolicy()
    with running(policy, max_batch=1, max_wait_ms=0) as endpoint:
        concurrently(endpoint, [{"id": i} for i in range(3)])
    assert policy.batches == [] and policy.singles == 3


def test_the_template_uses_predict_batch_with_one_generator_per_request():
    class Sampler:
        action_dim = 2

        def __init__(self) -> None:
            self.calls: list[int] = []

        def predict(self, image, instruction, rng):
            return rng.normal(size=2)

        def predict_batch(self, images, instructions, rngs):
            self.calls.append(len(images))
            return np.stack([rng.normal(size=2) for rng in rngs])

    def request(episode: int, step: int) -> dict[str, Any]:
        key = {"benchmark": "b", "suite": "s", "task": "t", "episode": episode, "seed": 7, "step": step}
        return {"observation/image": np.zeros((4, 4, 3), np.uint8), "prompt": "go", "evalwf/episode": key}

    sampler = Sampler()
    adapter = PredictAdapter(sampler, "observation/image", "prompt", repeat=1)
    with running(adapter, max_batch=4, max_wait_ms=2000) as endpoint:
        batched = concurrently(endpoint, [request(e, 3) for e in range(4)], rounds=3)
    # predict_batch got batches of several requests (how they split is the batcher's: test_concurrent_requests_...)
    assert sampler.calls and max(sampler.calls) > 1, sampler.calls
    alone = [adapter.infer(request(e, 3))["actions"] for e in range(4)]  # predict, one request at a time
    for reply, single in zip(batched, alone, strict=True):
        np.testing.assert_array_equal(reply["actions"], single)
    assert not np.array_equal(alone[0], alone[1]), "episodes must get different generators"
    np.testing.assert_array_equal(alone[0], adapter.infer(request(0, 3))["actions"])
    assert not np.array_equal(alone[0], adapter.infer(request(0, 4))["actions"]), "steps must differ"


def test_a_policy_without_predict_is_refused_with_the_contract():
    with pytest.raises(TypeError, match="predict"):
        PredictAdapter(object(), "observation/image", "prompt", repeat=1)


def test_the_worker_configures_the_server_batch_from_its_slots_unless_the_policy_sets_max_batch(tmp_path):
    from evalwf.policy.spec import PolicySpec

    block = {"name": "p", "command": "serve --port {port} --max-batch {max_batch} --max-wait-ms {max_wait_ms}"}
    assert (
        PolicySpec.from_config(block)
        .render_command(port=1, gpu="0", slots=4)
        .endswith("--max-batch 4 --max-wait-ms 50")
    )
    fixed = PolicySpec.from_config({**block, "max_batch": 1, "max_wait_ms": 12.5})
    assert fixed.render_command(port=1, gpu="0", slots=4).endswith("--max-batch 1 --max-wait-ms 12.5")
    assert fixed.identity == PolicySpec.from_config(block).identity, "batching is operational, not identity"


def test_openpi_client_talks_to_a_batched_standin_server(tmp_path):
    openpi = pytest.importorskip("openpi_client.websocket_client_policy")
    from evalwf.policy.spec import PolicySpec
    from evalwf.worker.policy_server import GuardedPolicyServer

    stats = tmp_path / "stats.jsonl"
    command = f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --stats-file {stats}"
    with GuardedPolicyServer(log_dir=tmp_path, slots=3) as server:
        server.ensure(PolicySpec.from_config({"name": "s", "command": command}))
        observation = {"observation/state": np.zeros(4, np.float32), "observation/goal": np.ones(4, np.float32)}
        theirs = openpi.WebsocketClientPolicy("127.0.0.1", server.port).infer(observation)
        with PolicyClient(server.endpoint) as ours:
            mine = ours.infer(observation)
        assert "batches of up to 3" in server.process.log_tail()
    np.testing.assert_array_equal(theirs["actions"], mine["actions"])
    assert theirs["actions"].shape == (10, 7)
