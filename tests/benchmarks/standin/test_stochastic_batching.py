"""A stochastic policy's records do not depend on how its requests were served: batch size 1 or 5, one slot or
four sharing a batching server, batching on or off (each request carries its episode and step, and the server
draws from a generator derived from them); a deterministic policy is bitwise identical under batching."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from benchkit import Records, campaign_config, evaluate_campaign

from benchmarks.standin.policy_server import StandinPolicy
from evalwf.policy.episode_identity import EPISODE_KEY
from evalwf.policy.spec import PolicySpec
from evalwf.worker.policy_server import GuardedPolicyServer

SERVER = "{python} -m benchmarks.standin.policy_server --port {port} --noise 1.2 --stats-file {stats}"
POLICY = {"name": "standin-policy", "command": "{python} -m benchmarks.standin.policy_server --port {port} --noise 1.2"}


def evaluate(tmp_path: Path, endpoint: str, batch_size: int, slots: int) -> Records:
    """Every batch of a small stand-in campaign, `slots` at a time against `endpoint`."""
    section = {
        "episodes_per_task": 5,
        "batch_size": batch_size,
        "max_steps": 30,
        "suites": {"alpha": ["reach", "push"]},
    }
    return evaluate_campaign(campaign_config(tmp_path, "standin", section, POLICY), endpoint, slots)


def served(tmp_path: Path, name: str, extra: str, slots: int):
    stats = tmp_path / f"{name}.jsonl"
    spec = PolicySpec.from_config({"name": "s", "command": SERVER.replace("{stats}", str(stats)) + extra})
    server = GuardedPolicyServer(log_dir=tmp_path / name, slots=slots)
    server.ensure(spec)
    return server, stats


def batch_sizes(stats: Path) -> list[int]:
    return [json.loads(line)["batch_size"] for line in stats.read_text().splitlines()]


def test_stochastic_records_equal_across_batch_sizes_slots_and_batching(tmp_path):
    runs = {}
    for label, extra, slots, batch_size in (
        ("alone", " --stochastic --max-batch 1", 1, 1),
        ("batch5", " --stochastic --max-batch 1", 1, 5),
        ("batched", " --stochastic", 4, 1),  # the worker's slots become the server's max_batch
    ):
        server, stats = served(tmp_path, label, extra, slots)
        try:
            runs[label] = evaluate(tmp_path / label, server.endpoint, batch_size, slots)
        finally:
            server.stop()
        runs[label + ":sizes"] = batch_sizes(stats)
    assert runs["alone"] == runs["batch5"] == runs["batched"]
    assert len(runs["alone"]) == 10
    assert max(runs["batched:sizes"]) > 1, "four slots against one server should have been batched"
    assert set(runs["alone:sizes"]) == {1}
    assert {r["success"] for r in runs["alone"].values()} == {True, False}


def test_a_deterministic_policy_is_bitwise_identical_with_batching_on_and_off(tmp_path):
    runs = {}
    for label, extra, slots in (("off", " --max-batch 1", 1), ("on", "", 4)):
        server, stats = served(tmp_path, label, extra, slots)
        try:
            runs[label] = evaluate(tmp_path / label, server.endpoint, 1, slots)
        finally:
            server.stop()
        runs[label + ":sizes"] = batch_sizes(stats)
    assert runs["off"] == runs["on"]
    assert max(runs["on:sizes"]) > 1


def test_the_stochastic_standin_draws_from_the_request_not_the_observation():
    policy = StandinPolicy(action_dim=4, horizon=3, noise=1.0, latency_s=0.0, stochastic=True)
    observation = {"observation/state": np.zeros(4), "observation/goal": np.ones(4)}

    def at(step: int, episode: int = 0) -> np.ndarray:
        key = {"benchmark": "standin", "suite": "alpha", "task": "reach", "episode": episode, "seed": 1, "step": step}
        return policy.infer({**observation, EPISODE_KEY: key})

    np.testing.assert_array_equal(at(0), at(0))
    assert not np.array_equal(at(0), at(5)), "the same observation at another step draws other noise"
    assert not np.array_equal(at(0), at(0, episode=1))
    # the deterministic stand-in ignores where a request comes from
    deterministic = StandinPolicy(action_dim=4, horizon=3, noise=1.0, latency_s=0.0)
    key = {"benchmark": "standin", "suite": "alpha", "task": "reach", "episode": 0, "seed": 1, "step": 0}
    tagged = {**observation, EPISODE_KEY: key}
    np.testing.assert_array_equal(deterministic.infer(observation), deterministic.infer(tagged))
