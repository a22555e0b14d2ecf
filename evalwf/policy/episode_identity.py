"""Which episode, and which step of it, a policy request belongs to: the key that keeps stochastic policies
reproducible however requests are batched or interleaved.

Every request a batch sends carries, beside the benchmark's own observation keys,

    "evalwf/episode": {"benchmark": str, "suite": str, "task": str, "episode": int, "seed": int, "step": int}

(`episode` is the episode index of the task, `seed` the manifest's seed of that episode, `step` the number of
simulator steps executed before this request). openpi-compatible servers ignore it (their input transforms build
the model's inputs from the keys they know). Servers of this project derive a per-request random generator from
it (request_rng), so a policy that samples (pi0's flow-matching noise, a diffusion policy) draws the same numbers
for the same episode and step whether it is served alone, in a batch of 50, by one slot or eight.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalwf.policy.wire import Message

EPISODE_KEY = "evalwf/episode"


@dataclass
class EpisodeTag:
    """The identity of one episode; the rollout loop advances `step` as it executes actions."""

    benchmark: str
    suite: str
    task: str
    episode: int
    seed: int
    step: int = 0

    def policy(self, client: Any) -> TaggedPolicy:
        """`client` (the batch's policy client) sending this episode's key with every request."""
        return TaggedPolicy(client, self)

    def as_key(self) -> dict[str, str | int]:
        return {
            "benchmark": self.benchmark,
            "suite": self.suite,
            "task": self.task,
            "episode": int(self.episode),
            "seed": int(self.seed),
            "step": int(self.step),
        }


class TaggedPolicy:
    """A policy client whose every request carries the episode's key (at the step the tag holds)."""

    def __init__(self, client: Any, tag: EpisodeTag):
        self.client, self.tag = client, tag

    def infer(self, request: Message) -> Message:
        return self.client.infer({**request, EPISODE_KEY: self.tag.as_key()})

    def __getattr__(self, name: str) -> Any:  # reset(), metadata, ... of the client
        return getattr(self.client, name)


def request_rng(observation: Message) -> np.random.Generator:
    """The generator of one request: a pure function of its episode key (benchmark, suite, task, episode, seed,
    step). A request without the key (a client that is not this workflow) gets an unseeded generator; a key that
    lacks a field fails its request (KeyError) rather than drawing numbers no rerun could repeat."""
    key = observation.get(EPISODE_KEY)
    if not isinstance(key, dict):
        return np.random.default_rng()
    name = f"{key['benchmark']}/{key['suite']}/{key['task']}"
    words = [zlib.crc32(name.encode()), int(key["episode"]), int(key["seed"]), int(key["step"])]
    return np.random.default_rng(np.random.SeedSequence([word % 2**64 for word in words]))
