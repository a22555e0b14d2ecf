"""Batch evaluation: identical records for any batching, equal to upstream's sequential loop, RNG-isolated."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from robotwin_testlib import (
    ADAPTER,
    InProcessPolicy,
    build,
    run_batches,
    same_numpy_state,
    section,
    upstream_sequential_loop,
    without_duration,
)

from evalwf.benchmark.adapter import BatchContext, TaskRef
from evalwf.benchmark.batches import EpisodeRange

FAST = {"step_limit": 60}


@pytest.mark.parametrize(
    ("suite", "task", "overrides"),
    [
        ("demo_clean-unseen", "click_bell", {}),
        ("demo_randomized-seen", "stack_blocks_two", {}),
        ("demo_randomized-unseen", "dump_bin_bigbin", {}),
        ("demo_randomized-unseen", "dump_bin_bigbin", {"reproduce_clutter_drift": False}),
    ],
)
def test_records_identical_for_batch_sizes_1_5_and_the_whole_task(tmp_path, suite, task, overrides):
    cfg = section(tasks=[task], episodes_per_task=20, **FAST, **overrides)
    manifest = build(cfg, suite.split("-")[0], task)
    runs = {size: without_duration(run_batches(cfg, suite, task, manifest, size, tmp_path)) for size in (1, 5, 20)}
    assert runs[1] == runs[5] == runs[20]
    records = runs[1]
    assert [r["index"] for r in records] == list(range(20))
    assert 0 < sum(r["success"] for r in records) < 20, "the stand-in policy should both succeed and fail"
    kind = suite.split("-")[1]
    for record, entry in zip(records, manifest["episodes"], strict=True):
        assert record["seed"] == record["setup"]["env_seed"] == entry["env_seed"]
        assert record["extra"]["instruction"] == entry[f"instruction_{kind}"]
        assert record["extra"]["step_lim"] == 60
        assert record["extra"]["clear_cache"] == ((record["index"] + 2) % 5 == 0)


def test_one_hundred_episodes_in_batches_of_1_5_and_100(tmp_path):
    cfg = section(tasks=["lift_pot"], episodes_per_task=100, step_limit=30)
    manifest = build(cfg, "demo_clean", "lift_pot")
    runs = [
        without_duration(run_batches(cfg, "demo_clean-seen", "lift_pot", manifest, size, tmp_path))
        for size in (1, 5, 100)
    ]
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) == 100


@pytest.mark.parametrize(
    ("suite", "task", "overrides"),
    [
        ("demo_clean-unseen", "click_bell", {}),
        ("demo_randomized-seen", "beat_block_hammer", {}),
        ("demo_randomized-unseen", "put_bottles_dustbin", {}),  # reproduce_clutter_drift by default
        ("demo_randomized-seen", "dump_bin_bigbin", {"reproduce_clutter_drift": True}),
    ],
)
def test_batches_reproduce_the_upstream_sequential_episodes(tmp_path, suite, task, overrides):
    """Upstream step limits, upstream loop with the same policy; the text is the manifest's (upstream's own text
    is not reproducible). Drift tasks match only with reproduce_clutter_drift (the default)."""
    task_config, kind = suite.split("-")
    cfg = section(tasks=[task], episodes_per_task=8, **overrides)
    manifest = build(cfg, task_config, task)
    records = run_batches(cfg, suite, task, manifest, 3, tmp_path)
    reference = upstream_sequential_loop(
        task, task_config, 0, 8, instruction_type=kind, policy=InProcessPolicy(), bench_cfg=cfg,
        instruction_for=lambda k: manifest["episodes"][k][f"instruction_{kind}"],
    )  # fmt: skip
    assert [ep["env_seed"] for ep in manifest["episodes"]] == reference["accepted"]
    assert [{"success": r["success"], "steps": r["steps"]} for r in records] == reference["outcomes"]
    assert all(r["extra"]["instruction_position_matches_manifest"] for r in records)
    assert any(not o["success"] for o in reference["outcomes"]) or any(o["steps"] > 1 for o in reference["outcomes"])


def test_drift_task_without_reproduction_starts_each_episode_fresh(tmp_path):
    cfg = section(tasks=["put_bottles_dustbin"], episodes_per_task=6, reproduce_clutter_drift=False, **FAST)
    manifest = build(cfg, "demo_randomized", "put_bottles_dustbin")
    records = run_batches(cfg, "demo_randomized-unseen", "put_bottles_dustbin", manifest, 2, tmp_path)
    assert {tuple(r["extra"]["clutter_xlim_default"]) for r in records} == {(-0.59, 0.59)}
    recorded = [e["clutter_xlim_default"] for e in manifest["episodes"]]
    assert recorded[0] != recorded[-1]  # what the sequential loop had: not reproduced with the option off
    assert not all(r["extra"]["instruction_position_matches_manifest"] for r in records)


@pytest.mark.parametrize("task", ["dump_bin_bigbin", "put_bottles_dustbin"])
def test_upstream_clutter_has_drifted_before_episode_0_and_the_default_reproduces_it(tmp_path, task):
    """Upstream's expert check runs a setup before every policy setup, so episode 0's clutter area has already
    moved (once per earlier cluttered setup, then again in its own setup): a fresh process's value is not
    upstream's even for episode 0. The schema's default (reproduce_clutter_drift: true) restores it."""
    cfg = section(tasks=[task], episodes_per_task=4, **FAST)
    assert cfg.reproduce_clutter_drift is True  # the schema's default
    manifest = build(cfg, "demo_randomized", task)
    first = manifest["episodes"][0]
    setups_before = 1 + first["seeds_skipped_before"]  # expert checks run before episode 0's policy setup
    assert first["clutter_xlim_default"][0] >= -0.59 + 0.3 * setups_before - 1e-9
    assert first["clutter_xlim_default"] != [-0.59, 0.59]
    default = run_batches(cfg, "demo_randomized-unseen", task, manifest, 4, tmp_path)
    recorded = [e["clutter_xlim_default"] for e in manifest["episodes"]]
    assert [r["extra"]["clutter_xlim_default"] for r in default] == recorded
    assert all(r["extra"]["instruction_position_matches_manifest"] for r in default)
    off = replace(cfg, reproduce_clutter_drift=False)
    fresh = run_batches(off, "demo_randomized-unseen", task, manifest, 4, tmp_path)
    assert fresh[0]["extra"]["clutter_xlim_default"] == [-0.59, 0.59]
    assert not fresh[0]["extra"]["instruction_position_matches_manifest"]  # episode 0 differs too


def test_evaluation_leaves_the_callers_rng_untouched(tmp_path):
    cfg = section(episodes_per_task=4, **FAST)
    manifest = build(cfg, "demo_randomized", "click_bell", text_seed=None)
    np.random.seed(42)
    random.seed(7)
    np_state, py_state = np.random.get_state(), random.getstate()
    ctx = BatchContext(TaskRef("robotwin", "demo_randomized-seen", "click_bell"), EpisodeRange(0, 4), manifest, cfg,
                       InProcessPolicy(), tmp_path, log=lambda m: None)  # fmt: skip
    records = []
    for record in ADAPTER.evaluate_batch(ctx):
        # Between episodes (while the caller holds the generator) the caller's state is its own.
        after = np.random.get_state()
        assert same_numpy_state(np_state, after)
        assert random.getstate() == py_state
        records.append(record)
    assert len(records) == 4
    # A caller that consumes its RNG between episodes does not change the results.
    noisy = []
    for record in ADAPTER.evaluate_batch(ctx):
        np.random.rand(100)
        random.random()
        noisy.append(record)
    assert without_duration(noisy) == without_duration(records)


def test_missing_instruction_type_text_is_an_error(tmp_path):
    cfg = section(episodes_per_task=2, **FAST)
    manifest = build(cfg, "demo_clean", "click_bell")
    manifest["episodes"][1]["instruction_seen"] = None
    ctx = BatchContext(TaskRef("robotwin", "demo_clean-seen", "click_bell"), EpisodeRange(0, 2), manifest, cfg,
                       InProcessPolicy(), tmp_path, log=lambda m: None)  # fmt: skip
    with pytest.raises(Exception, match=r"episode 1 .*no seen instruction"):
        list(ADAPTER.evaluate_batch(ctx))


def test_without_the_instruction_draw_replay_rollouts_diverge(tmp_path, monkeypatch):
    """The replayed np.random.choice is what keeps the rollout's numpy stream equal to upstream's."""
    cfg = section(tasks=["lift_pot"], episodes_per_task=8, **FAST)
    manifest = build(cfg, "demo_clean", "lift_pot")
    faithful = without_duration(run_batches(cfg, "demo_clean-unseen", "lift_pot", manifest, 8, tmp_path))
    from benchmarks.robotwin import evaluator

    class NoDraw:
        def __getattr__(self, name):
            return (lambda n: 0) if name == "choice" else getattr(np.random, name)

    monkeypatch.setattr(evaluator, "np", type("np", (), {"random": NoDraw()}))
    skipped = without_duration(run_batches(cfg, "demo_clean-unseen", "lift_pot", manifest, 8, tmp_path))
    assert [(r["success"], r["steps"]) for r in skipped] != [(r["success"], r["steps"]) for r in faithful]
