"""Every one of the 50 tasks evaluates a batch to a validated result on the stand-in checkout, and the three tasks
whose upstream check_success reads state that only play_once sets are evaluated as upstream does."""

from __future__ import annotations

import numpy as np
import pytest
from robotwin_testlib import (
    ADAPTER,
    STANDIN_PATH,
    InProcessPolicy,
    build,
    run_batches,
    section,
    upstream_sequential_loop,
)

from benchmarks.robotwin import expert_state
from benchmarks.robotwin.checkout import RobotwinCheckout, simulator_rng_guard
from benchmarks.robotwin.tasks import PLAY_ONCE_STATE, TASKS
from evalwf.benchmark.adapter import BatchContext, TaskRef
from evalwf.benchmark.batches import EpisodeRange
from evalwf.common.errors import ManifestError
from evalwf.plan.results import BatchExpectation, build_batch_result, validate_batch_result, write_batch_result
from evalwf.policy.spec import PolicySpec

PLAY_ONCE_TASKS = ("open_laptop", "place_object_scale", "put_object_cabinet")


def _family(task: str) -> str:
    """Task families by their verb (upstream groups its task files the same way: place_*, stack_*, ...)."""
    return task.split("_")[0]


FAMILIES: dict[str, list[str]] = {}
for _task in TASKS:
    FAMILIES.setdefault(_family(_task), []).append(_task)


def test_the_families_cover_the_50_tasks():
    assert sorted(t for tasks in FAMILIES.values() for t in tasks) == sorted(TASKS)
    assert len(TASKS) == 50


def _evaluate_to_validated_result(cfg, task_config, task, tmp_path):
    """Manifest of 2 episodes, one batch of both, written and checked by the layered batch validation."""
    manifest = build(cfg, task_config, task)
    suite = f"{task_config}-unseen"
    episodes = EpisodeRange(0, 2)
    ctx = BatchContext(TaskRef("robotwin", suite, task), episodes, manifest, cfg, InProcessPolicy(), tmp_path,
                       log=lambda message: None)  # fmt: skip
    records = list(ADAPTER.evaluate_batch(ctx))
    identity = PolicySpec.from_config({"name": "p", "command": "x --port {port}"}).identity
    result = build_batch_result(
        run="t", benchmark="robotwin", suite=suite, task=task, episodes=episodes,
        manifest_hash=manifest["manifest_hash"], policy_identity=identity, records=records,
        started_at="", finished_at="", duration_s=0.0,
    )  # fmt: skip
    path = tmp_path / f"{task_config}-{task}.json"
    write_batch_result(path, result)
    expected = BatchExpectation("robotwin", suite, task, episodes, manifest, identity, ADAPTER.record_setup_keys)
    return validate_batch_result(path, expected)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_task_of_the_family_evaluates_a_batch_to_a_result(family, tmp_path):
    """Both task configs, a tiny batch each: no task may fail its batch (without play_once's state, open_laptop,
    place_object_scale and put_object_cabinet raised AttributeError at their first success check)."""
    for task in FAMILIES[family]:
        cfg = section(tasks=[task], episodes_per_task=2, step_limit=40)
        for task_config in ("demo_clean", "demo_randomized"):
            result = _evaluate_to_validated_result(cfg, task_config, task, tmp_path)
            assert [r["index"] for r in result["episodes"]] == [0, 1], task
            assert all(r["steps"] >= 1 for r in result["episodes"]), task


def test_play_once_state_table_names_exactly_the_three_upstream_tasks():
    """Read from upstream stable_2.0 envs/*.py: check_success reads self.arm_tag (and self.origin_z in
    put_object_cabinet), assigned only in play_once; no other task has such an attribute."""
    assert PLAY_ONCE_STATE == {
        "open_laptop": ("arm_tag",),
        "place_object_scale": ("arm_tag",),
        "put_object_cabinet": ("arm_tag", "origin_z"),
    }


@pytest.mark.parametrize("task", PLAY_ONCE_TASKS)
def test_standin_check_success_depends_on_play_once_state_as_upstream(task):
    """The stand-in reproduces the dependency: after setup_demo alone, check_success raises AttributeError."""
    checkout = RobotwinCheckout(STANDIN_PATH)
    with simulator_rng_guard(), checkout.activated():
        args = checkout.eval_args(task, "demo_clean")
        env = checkout.make_env(task)
        env.setup_demo(now_ep_num=0, seed=100000, is_test=True, **args)
        with pytest.raises(AttributeError, match="arm_tag"):
            env.check_success()
        env.play_once()
        assert env.check_success() in (True, False)
        for name in PLAY_ONCE_STATE[task]:
            assert hasattr(env, name)


@pytest.mark.parametrize("task", PLAY_ONCE_TASKS)
def test_play_once_tasks_reproduce_the_upstream_sequential_episodes(task, tmp_path):
    """Outcomes per episode equal upstream's loop, which runs setup_demo + play_once for the seed right before
    each policy episode; the batch restores what play_once left on the env from the sealed manifest."""
    cfg = section(tasks=[task], episodes_per_task=8)
    for task_config, kind in (("demo_clean", "unseen"), ("demo_randomized", "seen")):
        manifest = build(cfg, task_config, task)
        records = run_batches(cfg, f"{task_config}-{kind}", task, manifest, 3, tmp_path)
        reference = upstream_sequential_loop(
            task, task_config, 0, 8, instruction_type=kind, policy=InProcessPolicy(), bench_cfg=cfg,
            instruction_for=lambda k, m=manifest, t=kind: m["episodes"][k][f"instruction_{t}"],
        )  # fmt: skip
        assert [ep["env_seed"] for ep in manifest["episodes"]] == reference["accepted"]
        assert [{"success": r["success"], "steps": r["steps"]} for r in records] == reference["outcomes"]
        assert any(o["success"] for o in reference["outcomes"]), "the policy should succeed sometimes"
        arms = {ep["expert_state"]["arm_tag"]["value"] for ep in manifest["episodes"]}
        assert arms <= {"left", "right"}


def test_the_restored_state_is_what_decides_success(tmp_path):
    """Restoring the other arm changes the outcomes (which joints must reach the target, so success and when):
    the stand-in's success really reads play_once's arm_tag, so a wrong restore would not go unnoticed."""
    cfg = section(tasks=["open_laptop"], episodes_per_task=8)
    manifest = build(cfg, "demo_clean", "open_laptop")
    faithful = run_batches(cfg, "demo_clean-unseen", "open_laptop", manifest, 8, tmp_path)
    for entry in manifest["episodes"]:
        state = entry["expert_state"]["arm_tag"]
        state["value"] = "left" if state["value"] == "right" else "right"
    swapped = run_batches(cfg, "demo_clean-unseen", "open_laptop", manifest, 8, tmp_path)
    assert [(r["success"], r["steps"]) for r in faithful] != [(r["success"], r["steps"]) for r in swapped]


def test_a_manifest_without_the_play_once_state_is_refused_with_the_reason(tmp_path):
    cfg = section(tasks=["put_object_cabinet"], episodes_per_task=2, step_limit=40)
    manifest = build(cfg, "demo_clean", "put_object_cabinet")
    del manifest["episodes"][1]["expert_state"]
    ctx = BatchContext(TaskRef("robotwin", "demo_clean-seen", "put_object_cabinet"), EpisodeRange(0, 2), manifest,
                       cfg, InProcessPolicy(), tmp_path, log=lambda m: None)  # fmt: skip
    with pytest.raises(Exception, match=r"episode 1 .*play_once.*arm_tag"):
        list(ADAPTER.evaluate_batch(ctx))


def test_play_once_state_is_part_of_the_manifest_definition_of_those_tasks_only():
    cfg = section(tasks=["open_laptop", "click_bell"])
    with_state = ADAPTER.manifest_definition(cfg, "demo_clean", "put_object_cabinet")
    assert with_state["play_once_state"] == ["arm_tag", "origin_z"]
    assert "play_once_state" not in ADAPTER.manifest_definition(cfg, "demo_clean", "click_bell")


def test_expert_state_round_trips_value_and_type_exactly():
    """origin_z is a float32 upstream (a SAPIEN pose): restored as the same float32, so check_success's
    `object_z - origin_z` is computed in the same precision; ArmTag comes back as the checkout's ArmTag."""
    with RobotwinCheckout(STANDIN_PATH).activated():
        from envs.utils import ArmTag

        class Env:
            arm_tag = ArmTag("right")
            origin_z = np.float32(0.7412345)
            height = 0.1 + 0.2

        state = expert_state.capture(Env(), ("arm_tag", "origin_z", "height"), "test")
        assert state["origin_z"]["type"] == "numpy.float32"
        restored = Env.__new__(Env)
        expert_state.restore(restored, ("arm_tag", "origin_z", "height"), state, "test")
        assert vars(restored)["arm_tag"] is ArmTag("right")
        assert type(vars(restored)["origin_z"]) is np.float32 and vars(restored)["origin_z"] == Env.origin_z
        assert vars(restored)["height"] == 0.1 + 0.2

        class Opaque:
            value = object()

        with pytest.raises(ManifestError, match="not restorable"):
            expert_state.capture(Opaque(), ("value",), "test")
        with pytest.raises(ManifestError, match="not restorable"):
            expert_state.decode({"type": "os.system", "value": "true"})
