"""The plan prices from what this machine measured: at the step limit each recorded episode ran under, failures to
the limit, successes shortening the expectation, one episode enough, and another suite of the same benchmark before
any documented figure. Batch records fabricated as the workers write them (LIBERO's extra.max_steps included)."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from costkit import record_batch

from evalwf.benchmark.adapter import TaskRef
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.cost import BENCHMARK_MEASURED, SUITE_MEASURED, CostModel
from evalwf.plan.table import build_plan

# libero_spatial's openpi horizon in policy steps, as records count them (extra.max_steps; the 10 settle steps are in
# each episode's duration only: LiberoAdapter.recorded_step_limit)
SPATIAL_LIMIT = 220


def libero_campaign(tmp_path, *overrides: dict) -> Campaign:
    config = load_config(REPO / "config" / "libero.yaml", REPO / "config" / "policies" / "standin.yaml").document()
    config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
    for override in overrides:
        config["benchmarks"]["libero"].update(override)
    return Campaign(validate_config(config)).single()


def test_failures_recorded_under_a_shortened_horizon_are_priced_at_the_full_horizon(tmp_path):
    """The demo's episodes ran 20 of 20 steps and failed: a full-horizon episode runs 220 steps, not 9 % of them."""
    for task in (0, 1, 2):  # 6 episodes: more than the 5 the plan once required
        record_batch(tmp_path, "libero_spatial", task, [(20, False), (20, False)], max_steps=20, step_s=1.5)
    model = CostModel.measure(libero_campaign(tmp_path))
    ref = TaskRef("libero", "libero_spatial", "0")
    assert model.basis(ref) == SUITE_MEASURED
    timing = model.timings[("libero", "libero_spatial")]
    assert timing.steps_used == timing.steps_used_p90 == 1.0
    # no spread of step counts: the reset is carried by the step time ((2 + 20 x 1.5) / 20 = 1.6 s a step)
    assert model.seconds_per_episode(ref) == pytest.approx(SPATIAL_LIMIT * 1.6)


def test_a_measured_success_rate_shortens_the_expectation_and_failures_run_to_the_limit(tmp_path):
    """4 of 5 episodes succeed after 20 of 100 steps, one fails at 100: expected 0.8 x 0.2 + 0.2 = 36 % of the
    limit (the median of the five, 20 %, would price the failure as if it succeeded)."""
    record_batch(tmp_path, "libero_spatial", 0, [(20, True)] * 4 + [(100, False)], 100, step_s=0.5)
    timing = CostModel.measure(libero_campaign(tmp_path)).timings[("libero", "libero_spatial")]
    assert timing.steps_used == pytest.approx(0.36)
    assert timing.successes == 4
    assert timing.steps_used < timing.steps_used_p90 < 1.0  # the p90 assumes fewer successes (Wilson, one-sided)
    assert (timing.reset_s, timing.step_s) == (pytest.approx(2.0), pytest.approx(0.5))


def test_one_measured_episode_prices_its_suite_and_the_plan_says_it_is_uncertain(tmp_path):
    record_batch(tmp_path, "libero_spatial", 0, [(20, False)], max_steps=20, step_s=1.0)
    plan = build_plan(libero_campaign(tmp_path), workers=1, batch_overhead_s=0.0)
    spatial = next(row for row in plan.rows if row.suite == "libero_spatial")
    assert spatial.priced_by == SUITE_MEASURED
    text = "\n".join(plan.estimate.assumptions)
    assert "1 episode(s) (step limit 20)" in text and "one episode: no spread measured" in text
    assert "a rough figure" in text


def test_a_suite_not_measured_takes_the_step_time_another_suite_of_its_benchmark_measured(tmp_path):
    """libero_object measured at 1.2 s a step: libero_spatial, never run, costs 1.2 s a step at its full horizon,
    not the documented figures."""
    record_batch(tmp_path, "libero_object", 3, [(10, True), (30, True), (50, False)], max_steps=50, step_s=1.2)
    campaign = libero_campaign(tmp_path, {"suites": {"libero_spatial": "all", "libero_object": "all"}})
    model = CostModel.measure(campaign)
    spatial, obj = TaskRef("libero", "libero_spatial", "0"), TaskRef("libero", "libero_object", "0")
    assert (model.basis(spatial), model.basis(obj)) == (BENCHMARK_MEASURED, SUITE_MEASURED)
    assert model.seconds_per_episode(spatial) == pytest.approx(2.0 + SPATIAL_LIMIT * 1.2)
    # 10 tasks x 50 episodes in batches of 5, each batch with the 1 s measured outside its episodes
    spatial_row = next(
        row for row in build_plan(campaign, workers=1, batch_overhead_s=0.0).rows if row.suite == "libero_spatial"
    )
    assert spatial_row.gpu_hours_to_run == pytest.approx((500 * (2.0 + SPATIAL_LIMIT * 1.2) + 100 * 1.0) / 3600)


def test_a_new_run_of_the_measured_suite_under_the_same_limit_costs_what_was_measured(tmp_path):
    """The demo's config again (20 policy steps + 10 settle steps a trial) under another run name: the 4 trials
    measured, each one batch, cost again what they took; the settle steps are not priced on top."""
    config = load_config(REPO / "config" / "demo.yaml").document()
    config.update(run="other", results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
    for task, index in ((0, 0), (0, 1), (1, 0), (1, 1)):
        record_batch(tmp_path, "libero_spatial", task, [(20, False)], max_steps=20, step_s=2.3)
        path = tmp_path / "results" / "demo" / "libero" / "batches" / "libero_spatial" / str(task) / "0000-1.json"
        path.rename(path.with_name(f"{index:04d}-1.json"))
    took = 4 * (2.0 + 20 * 2.3 + 1.0)
    plan = build_plan(Campaign(validate_config(config)).single(), workers=1, batch_overhead_s=0.0)
    assert plan.total.priced_by == SUITE_MEASURED
    assert plan.estimate.simulation_s == pytest.approx(took)


def test_a_recorded_reset_is_priced_once_per_episode_not_per_step(tmp_path):
    """The demo's trials all run their 20 steps, so no fit can tell the reset from the steps: LIBERO records it
    (reset_s: reset, initial state, settling). 20 s of reset + 20 x 1.35 s: a 220-step trial costs 20 + 220 x 1.35
    s, not 220 x 2.35 s."""
    for task in (0, 1):
        record_batch(tmp_path, "libero_spatial", task, [(20, False), (20, False)], max_steps=20, step_s=1.35)
    for path in (tmp_path / "results").rglob("*.json"):
        batch = json.loads(path.read_text())
        for record in batch["episodes"]:
            record["duration_s"] += 18.0  # 2 s + 18 s: the reset the record names
            record["reset_s"] = 20.0
        batch["duration_s"] += 18.0 * len(batch["episodes"])
        path.write_text(json.dumps(batch))
    model = CostModel.measure(libero_campaign(tmp_path))
    timing = model.timings[("libero", "libero_spatial")]
    assert (timing.reset_s, timing.step_s) == (pytest.approx(20.0), pytest.approx(1.35))
    assert model.seconds_per_episode(TaskRef("libero", "libero_spatial", "0")) == pytest.approx(20 + 220 * 1.35)
