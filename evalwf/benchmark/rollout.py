"""The closed loop shared by every adapter: ask the policy for an action chunk, execute `replan_steps` of it,
stop at success or the step limit; and the per-episode record every adapter returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from evalwf.benchmark.records import EpisodeRecord, Policy
from evalwf.common.json_types import JsonObject
from evalwf.policy.episode_identity import EpisodeTag

ObservationT = TypeVar("ObservationT")  # what `observe` returns and the policy takes


@dataclass(frozen=True)
class RolloutOutcome:
    success: bool
    steps: int


def chunked_rollout(
    policy: Policy[ObservationT],
    observe: Callable[[], ObservationT],
    act: Callable[[np.ndarray], bool],
    *,
    max_steps: int,
    replan_steps: int,
    tag: EpisodeTag | None = None,
) -> RolloutOutcome:
    """Run one episode. `act` executes one action and returns True once the task is solved. `tag` (the episode's
    identity, whose TaggedPolicy sends it with every request) learns the step each request is made at."""
    steps = 0
    while steps < max_steps:
        if tag is not None:
            tag.step = steps
        chunk = np.asarray(policy.infer(observe())["actions"])
        if chunk.ndim != 2 or chunk.shape[0] == 0:
            raise ValueError(f"policy returned actions of shape {chunk.shape}; expected [horizon, action_dim]")
        for action in chunk[: min(replan_steps, max_steps - steps)]:
            steps += 1
            if act(action):
                return RolloutOutcome(True, steps)
    return RolloutOutcome(False, steps)


def episode_record(
    *,
    index: int,
    seed: int,
    setup: JsonObject,
    success: bool,
    steps: int,
    duration_s: float,
    error: str | None = None,
    extra: JsonObject | None = None,
    reset_s: float | None = None,
) -> EpisodeRecord:
    """The per-episode record of the batch result schema (evalwf/plan/batch_result.schema.json). `reset_s`: of
    duration_s, the seconds before the policy's first step (reset, initial state, settling), where a benchmark
    measures them; a timing like duration_s, so the plan prices set-up and steps apart (evalwf.plan.timings)."""
    record: EpisodeRecord = {
        "index": index,
        "seed": seed,
        "setup": setup,
        "success": bool(success),
        "steps": int(steps),
        "duration_s": round(float(duration_s), 6),
        "error": error,
        "extra": extra or {},
    }
    if reset_s is not None:
        record["reset_s"] = round(float(reset_s), 6)
    return record
