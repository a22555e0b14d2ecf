"""Helpers for the RoboTwin tests: configs, an in-process stand-in policy, batch runs, and a reference
implementation of upstream's sequential loop (script/eval_policy.py, from shared/reference/robotwin.md)."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.robotwin.checkout import PROJECT_ROOT, RobotwinCheckout, set_clutter_xlim_default
from benchmarks.robotwin.observation import PolicyMapping
from benchmarks.robotwin.settings import RobotwinSettings
from benchmarks.standin.policy_server import StandinPolicy
from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter
from evalwf.benchmark.batches import plan_batches
from evalwf.plan.config import validate_config
from evalwf.plan.manifest import build_manifest_document

ADAPTER = get_adapter("robotwin")
STANDIN_ROOT = "benchmarks/robotwin/standin_checkout"
STANDIN_PATH = PROJECT_ROOT / STANDIN_ROOT
# The stand-in policy is a controller: it needs the stand-in's target and answers offsets from the state.
STANDIN_MAPPING = {
    "observation": {
        "images": {"observation/image": "head_camera"},
        "images_key": None,
        "image_layout": "HWC",
        "state_key": "observation/state",
        "extra": {"observation/goal": "oracle.target_qpos"},
    },
    "action": {"delta": True},
}


def raw_section(**overrides: Any) -> dict[str, Any]:
    """A validated benchmarks.robotwin section (schema defaults filled in) against the stand-in checkout."""
    robotwin = {
        "robotwin_root": STANDIN_ROOT,
        "tasks": ["click_bell"],
        "task_configs": ["demo_clean", "demo_randomized"],
        "instruction_types": ["seen", "unseen"],
        "episodes_per_task": 10,
        "batch_size": 1,
        "replan_steps": 10,
        **copy.deepcopy(STANDIN_MAPPING),
    }
    robotwin.update(overrides)
    config = {
        "run": "t",
        "policy": {"name": "p", "command": "{python} -m benchmarks.standin.policy_server --port {port}"},
        "benchmarks": {"robotwin": robotwin},
    }
    return validate_config(config).section_settings("robotwin")


def section(**overrides: Any) -> RobotwinSettings:
    """The settings of raw_section(**overrides): what the adapter reads."""
    return benchmark_settings("robotwin", raw_section(**overrides))


class InProcessPolicy:
    """The stand-in policy server's policy without the server: deterministic in the observation."""

    def __init__(self, noise: float = 0.6):
        self.policy = StandinPolicy(action_dim=14, horizon=10, noise=noise, latency_s=0.0)
        self.calls = 0

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return {"actions": self.policy.infer(observation)}


def build(bench_cfg: RobotwinSettings, task_config: str, task: str, text_seed: int | None = 0) -> dict[str, Any]:
    """Build a manifest. Its texts come from the (unseeded, as upstream) Python random: fixed here so that a
    test's outcome counts do not vary from one pytest process to the next."""
    if text_seed is not None:
        random.seed(text_seed)
    definition = ADAPTER.manifest_definition(bench_cfg, task_config, task)
    return build_manifest_document(ADAPTER, definition, task_config, task)


def run_batches(
    bench_cfg: RobotwinSettings, suite: str, task: str, manifest: dict[str, Any], batch_size: int, tmp: Path
) -> list[dict[str, Any]]:
    """Every episode of the task, batch by batch, each batch with a fresh policy client (as separate jobs)."""
    records = []
    for episodes in plan_batches(len(manifest["episodes"]), batch_size):
        ctx = BatchContext(TaskRef("robotwin", suite, task), episodes, manifest, bench_cfg, InProcessPolicy(), tmp,
                           log=lambda message: None)  # fmt: skip
        records.extend(ADAPTER.evaluate_batch(ctx))
    return records


def same_numpy_state(a: tuple, b: tuple) -> bool:
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b, strict=True))


def without_duration(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "duration_s"} for r in records]


def upstream_sequential_loop(
    task: str,
    task_config: str,
    seed: int,
    test_num: int,
    *,
    instruction_type: str = "unseen",
    policy: Any = None,
    bench_cfg: RobotwinSettings | None = None,
    instruction_for: Any = None,
) -> dict[str, Any]:
    """script/eval_policy.py's eval_policy loop, as in shared/reference/robotwin.md, in a fresh-process state.

    With a policy, each episode runs as RoboTwin's pi0 deploy_policy.eval does (chunk, take_action, get_obs
    after every action). Upstream's instruction text is not reproducible (unseeded Python random), so
    instruction_for(k) may substitute the text for episode k after upstream's np.random.choice.
    """
    checkout = RobotwinCheckout(STANDIN_PATH)
    bench_cfg = bench_cfg or section(observation={}, action={}, replan_steps=50)  # the schema's mapping
    mapping = PolicyMapping.from_settings(bench_cfg)
    replan = bench_cfg.replan_steps
    accepted, skipped, outcomes = [], [], []
    with checkout.activated():
        args = checkout.eval_args(task, task_config)
        TASK_ENV = checkout.make_env(task)  # upstream's names
        set_clutter_xlim_default(TASK_ENV)  # a fresh process
        UnStableError = checkout.unstable_error()
        generate_episode_descriptions = checkout.description_generator()

        def eval_func(TASK_ENV, model, observation):  # pi0 deploy_policy.eval
            request = mapping.request(observation, TASK_ENV.get_instruction())
            actions = mapping.actions(model.infer(request), mapping.state(observation), "reference")[:replan]
            for action in actions:
                TASK_ENV.take_action(action, action_type="qpos")
                observation = TASK_ENV.get_obs()

        st_seed = 100000 * (1 + seed)
        now_seed, now_id, succ_seed = st_seed, 0, 0
        clear_cache_freq = args["clear_cache_freq"]
        args["eval_mode"] = True
        while succ_seed < test_num:
            render_freq = args["render_freq"]
            args["render_freq"] = 0
            try:
                TASK_ENV.setup_demo(now_ep_num=now_id, seed=now_seed, is_test=True, **args)
                episode_info = TASK_ENV.play_once()
                TASK_ENV.close_env()
            except UnStableError:
                TASK_ENV.close_env()
                skipped.append((now_seed, "unstable"))
                now_seed += 1
                args["render_freq"] = render_freq
                continue
            except Exception:
                TASK_ENV.close_env()
                skipped.append((now_seed, "error"))
                now_seed += 1
                args["render_freq"] = render_freq
                continue
            if TASK_ENV.plan_success and TASK_ENV.check_success():
                succ_seed += 1
                accepted.append(now_seed)
            else:
                skipped.append((now_seed, "plan_failed" if not TASK_ENV.plan_success else "check_failed"))
                now_seed += 1
                args["render_freq"] = render_freq
                continue
            args["render_freq"] = render_freq
            TASK_ENV.setup_demo(now_ep_num=now_id, seed=now_seed, is_test=True, **args)
            results = generate_episode_descriptions(task, [episode_info["info"]], 100)  # upstream: test_num
            instruction = np.random.choice(results[0][instruction_type])
            if instruction_for is not None:
                instruction = instruction_for(now_id)
            TASK_ENV.set_instruction(instruction=instruction)
            if policy is not None:
                while TASK_ENV.take_action_cnt < TASK_ENV.step_lim:
                    observation = TASK_ENV.get_obs()
                    eval_func(TASK_ENV, policy, observation)
                    if TASK_ENV.eval_success:
                        break
                outcomes.append({"success": bool(TASK_ENV.eval_success), "steps": int(TASK_ENV.take_action_cnt)})
            now_id += 1
            TASK_ENV.close_env(clear_cache=((succ_seed + 1) % clear_cache_freq == 0))
            now_seed += 1
    return {"accepted": accepted, "skipped": skipped, "outcomes": outcomes}
