"""The cost estimate's arithmetic, checked by hand on small configs: step limits before anything ran, measured
durations after, and longest-first list scheduling on N workers."""

from __future__ import annotations

import pytest
from conftest import REPO, standin_config

from evalwf.benchmark.adapter import TaskRef
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.cost import (
    ASSUMED,
    CALIBRATED,
    MEASURED,
    CostModel,
    estimate,
    expected_batch_cost,
    list_schedule_span,
    span_lower_bound,
)
from evalwf.plan.table import build_plan


def small_campaign(tmp_path) -> Campaign:
    # 3 tasks (alpha/reach, alpha/push, beta/open) x 5 episodes in batches 2, 2, 1; at most 30 steps an episode
    return Campaign(validate_config(standin_config(tmp_path))).single()


def test_before_anything_ran_a_batch_costs_episodes_x_step_limit_x_seconds_per_step(tmp_path):
    campaign = small_campaign(tmp_path)
    model = CostModel.build(campaign, seconds_per_step=0.5)
    assert [expected_batch_cost(model, b) for b in campaign.batches()] == [30.0, 30.0, 15.0] * 3  # 2|1 x 30 x 0.5
    plan = build_plan(campaign, seconds_per_step=0.5, workers=2, batch_overhead_s=1.0)
    # 15 episodes x 30 steps x 0.5 s = 225 s
    assert plan.estimate.simulation_s == plan.estimate.campaign_simulation_s == 225.0
    assert plan.total.gpu_hours_to_run == pytest.approx(225.0 / 3600)
    # units with 1 s overhead: six of 31 s, three of 16 s. Longest first on 2 workers: 31 31 | 31 31 | 31 31 |
    # 16 16 | 16 -> 3 x 31 + 2 x 16 = 125 s; lower bound max(234 / 2, 31) = 117 s
    assert plan.estimate.span_s == 125.0
    assert plan.estimate.lower_bound_s == 117.0
    assert any("0.5 s per step" in line for line in plan.estimate.assumptions)
    assert {row.priced_by for row in plan.rows} == {ASSUMED}


def test_libero_estimate_is_500_episodes_per_suite_times_its_step_limit(tmp_path):
    config = load_config(REPO / "config" / "libero.yaml", REPO / "config" / "policies" / "standin.yaml")
    config.update(results_dir=str(tmp_path / "r"), manifest_cache=str(tmp_path / "c"))
    plan = build_plan(Campaign(validate_config(config)).single(), seconds_per_step=0.1, workers=1, batch_overhead_s=0.0)
    # (220 + 10) + (280 + 10) + (300 + 10) + (520 + 10) = 1360 steps x 500 episodes x 0.1 s = 68000 s
    assert plan.estimate.simulation_s == pytest.approx(68000.0)
    assert plan.estimate.span_s == pytest.approx(68000.0)  # one worker, no overhead: the span is the work


def test_measured_durations_take_over_per_task_and_calibrate_the_rest_of_the_benchmark(tmp_path):
    campaign = small_campaign(tmp_path)
    reach, push = TaskRef("standin", "alpha", "reach"), TaskRef("standin", "alpha", "push")
    # reach: two finished batches of 2 episodes, 12 s each -> 6 s per episode = 0.2 s per step at 30 steps
    model = CostModel.build(campaign, seconds_per_step=0.5, durations={reach: [(12.0, 2), (12.0, 2)]})
    assert (model.basis(reach), model.seconds_per_episode(reach)) == (MEASURED, 6.0)
    assert model.calibrated == {"standin": pytest.approx(0.2)}
    assert model.basis(push) == CALIBRATED
    assert model.seconds_per_episode(push) == pytest.approx(30 * 0.2)
    last_reach = campaign.task_plan("standin", "alpha", "reach").batches[-1]
    assert expected_batch_cost(model, last_reach) == 6.0  # 1 episode x 6 s
    found = estimate(model, campaign, campaign.batches(), workers=1, batch_overhead_s=0.0)
    assert found.simulation_s == pytest.approx(15 * 6.0)
    assert any("(standin 0.2 s)" in line for line in found.assumptions)


def test_longest_first_list_scheduling_is_the_textbook_lpt():
    # Graham's example: LPT gives 7 where 6 is possible (3+3 | 2+2+2); within its 4/3 - 1/6 bound
    assert list_schedule_span([2, 3, 2, 3, 2], workers=2) == 7
    assert span_lower_bound([2, 3, 2, 3, 2], workers=2) == 6
    assert list_schedule_span([5, 1, 1], workers=8) == 5  # more workers than units
    assert list_schedule_span([], workers=3) == 0.0
    with pytest.raises(ValueError):
        list_schedule_span([1.0], workers=0)
