"""Evaluate episodes [start, start+count) of one task as upstream's policy episode does (script/eval_policy.py).

Per episode, with the manifest's seed: setup_demo(now_ep_num, seed, is_test=True, **args); one
np.random.choice over a list as long as upstream's (so the numpy stream during the rollout is upstream's);
set_instruction(the manifest's TEXT for the suite's instruction type); reset the policy; ask for action chunks
and take_action(a, action_type) until take_action_cnt reaches step_lim or eval_success; close_env(clear_cache=
(k + 2) % clear_cache_freq == 0) for episode index k (upstream: (succ_seed + 1) % freq with succ_seed = k + 1).
For tasks whose check_success reads what play_once sets (tasks.PLAY_ONCE_STATE), the values the manifest
recorded after the expert run for the seed are restored after setup_demo, as upstream's env has them.
The caller's numpy / Python random / torch states are restored around every episode.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from benchmarks.robotwin import expert_state
from benchmarks.robotwin.checkout import (
    RobotwinCheckout,
    clutter_xlim_default,
    set_clutter_xlim_default,
    simulator_rng_guard,
)
from benchmarks.robotwin.observation import PolicyMapping, RobotwinObservation
from benchmarks.robotwin.settings import RobotwinSettings
from benchmarks.robotwin.tasks import INSTRUCTION_TYPES, PLAY_ONCE_STATE, split_suite
from evalwf.benchmark.adapter import BatchContext
from evalwf.benchmark.records import EpisodeRecord, Policy, PolicyMessage
from evalwf.benchmark.rollout import chunked_rollout, episode_record
from evalwf.common.errors import ConfigError, ManifestError
from evalwf.common.json_types import JsonObject

RECORD_SETUP_KEYS = ("env_seed", *(f"instruction_{kind}" for kind in INSTRUCTION_TYPES))


def step_limit_override(settings: RobotwinSettings, task: str) -> int | None:
    """`step_limit` for `task`: None (upstream's table), the one limit of every task, or the task's own."""
    value = settings.step_limit
    if isinstance(value, Mapping):
        return value.get(task)
    return value


class _MappedPolicy:
    """The policy as chunked_rollout sees it: RoboTwin observation in, executable [H, dim] chunk out."""

    def __init__(self, client: Policy[PolicyMessage], mapping: PolicyMapping, instruction: str, where: str):
        self.client, self.mapping, self.instruction, self.where = client, mapping, instruction, where
        self.calls = 0

    def infer(self, observation: RobotwinObservation) -> PolicyMessage:
        state = self.mapping.state(observation)
        reply = self.client.infer(self.mapping.request(observation, self.instruction))
        self.calls += 1
        return {"actions": self.mapping.actions(reply, state, self.where)}


def _act(env: Any, action_type: str, refresh: bool, action: np.ndarray) -> bool:
    env.take_action(action, action_type=action_type)
    if refresh:  # RoboTwin's pi0/pi05 deploy_policy.eval reads get_obs() after every action
        env.get_obs()
    return bool(env.eval_success)


def reset_policy(client: Any) -> None:
    """eval_policy.py calls reset_model(model) before each episode. The openpi websocket protocol has no reset
    message and openpi servers keep no per-episode state (each request carries the prompt and observation), so
    this is a no-op for them; a client object with a reset() method gets it called."""
    reset = getattr(client, "reset", None)
    if callable(reset):
        reset()


def evaluate_task_batch(ctx: BatchContext[RobotwinSettings], checkout: RobotwinCheckout) -> Iterator[EpisodeRecord]:
    settings, ref = ctx.settings, ctx.ref
    task_config, instruction_type = split_suite(ref.suite)
    if ctx.manifest["definition"].get("task_config") != task_config or ctx.manifest.get("task") != ref.task:
        raise ManifestError(f"RoboTwin {ref.suite}/{ref.task}: manifest is for another task or task config")
    mapping = PolicyMapping.from_settings(settings)
    replan_steps = settings.replan_steps
    refresh = settings.refresh_obs_after_action
    reproduce_drift = settings.reproduce_clutter_drift
    override = step_limit_override(settings, ref.task)
    state_names = tuple(ctx.manifest["definition"].get("play_once_state") or PLAY_ONCE_STATE.get(ref.task, ()))
    with checkout.activated():
        args = checkout.eval_args(ref.task, task_config)
    if settings.instruction_types is None and checkout.protocol.instruction_from_task_config:
        configured = checkout.eval_instruction(task_config)  # main: the suite was planned from this default
        if configured != instruction_type:
            raise ConfigError(
                f"RoboTwin {ref.suite}/{ref.task}: {checkout.task_config_path(task_config)} says eval_instruction: "
                f"{configured}, but this batch was planned for {instruction_type}; rerun snakemake to plan again"
            )
    clear_cache_freq = int(settings.clear_cache_freq or args["clear_cache_freq"])  # null: the task config's
    env = None
    for index in ctx.episodes.indices():
        entry = ctx.manifest_episode(index)
        where = f"RoboTwin {ref.suite} task {ref.task} episode {index} (seed {entry['env_seed']})"
        instruction = entry[f"instruction_{instruction_type}"]
        if not instruction:
            raise ManifestError(f"{where}: the manifest has no {instruction_type} instruction for this episode")
        started = time.monotonic()
        extra: JsonObject = {"instruction": instruction, "instruction_type": instruction_type}
        with simulator_rng_guard(), checkout.activated():
            if env is None:
                env = checkout.make_env(ref.task)
            try:
                # Hidden upstream state (docs/robotwin.md): by default (reproduce_clutter_drift) the clutter xlim the
                # sequential loop had before this episode's setup is restored; false -> a fresh process's value.
                recorded = entry.get("clutter_xlim_default") if reproduce_drift else None
                set_clutter_xlim_default(env, recorded)
                extra["clutter_xlim_default"] = clutter_xlim_default(env)
                env.setup_demo(now_ep_num=entry["now_ep_num"], seed=entry["env_seed"], is_test=True, **args)
                if state_names:  # what upstream's expert run for this seed, right before, left on the env
                    expert_state.restore(env, state_names, entry.get("expert_state"), "manifest")
                # Upstream: instruction = np.random.choice(results[0][instruction_type]) right after setup_demo.
                choices = entry["instruction_choices"][instruction_type]  # 0: main used the task name, no draw
                position = int(np.random.choice(choices)) if choices else -1
                extra["instruction_position"] = position
                matches = position == entry["instruction_position"][instruction_type]
                extra["instruction_position_matches_manifest"] = matches
                if not matches:
                    ctx.log(
                        f"{where}: the numpy stream after setup_demo differs from the manifest build's (drawn "
                        f"position {position}, manifest {entry['instruction_position'][instruction_type]}); "
                        "expected only for clutter-drift tasks without reproduce_clutter_drift"
                    )
                env.set_instruction(instruction=instruction)
                reset_policy(ctx.policy)
                if override is not None:
                    env.step_lim = override
                step_lim = int(env.step_lim)
                tag = ctx.episode_tag(index, entry["seed"])
                policy = _MappedPolicy(tag.policy(ctx.policy), mapping, instruction, where)

                chunked_rollout(
                    policy,
                    env.get_obs,
                    functools.partial(_act, env, mapping.action_type, refresh),
                    max_steps=step_lim,
                    replan_steps=replan_steps,
                    tag=tag,
                )
                success, steps = bool(env.eval_success), int(env.take_action_cnt)
                clear_cache = (index + 2) % clear_cache_freq == 0
                env.close_env(clear_cache=clear_cache)
            except Exception as exc:
                try:
                    env.close_env()
                except Exception:
                    pass
                hint = ""
                if isinstance(exc, AttributeError) and not state_names:
                    hint = (
                        " (if check_success reads an attribute only play_once sets, list it under this task in "
                        "benchmarks/robotwin/tasks.py PLAY_ONCE_STATE)"
                    )
                raise RuntimeError(f"{where}: {type(exc).__name__}: {exc}{hint}") from exc
        extra.update({"step_lim": step_lim, "policy_calls": policy.calls, "clear_cache": clear_cache})
        yield episode_record(
            index=index,
            seed=entry["seed"],
            setup={key: entry[key] for key in RECORD_SETUP_KEYS},
            success=success,
            steps=steps,
            duration_s=time.monotonic() - started,
            extra=extra,
        )
