"""The cost estimate's arithmetic, checked by hand on small configs: step limits before anything ran, measured
durations after, and longest-first list scheduling on N workers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from conftest import REPO, standin_config

from evalwf.benchmark.adapter import TaskRef
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.cost import (
    ASSUMED,
    BENCHMARK_MEASURED,
    MEASURED,
    SUITE_MEASURED,
    CostModel,
    expected_batch_cost,
    list_schedule_span,
    span_lower_bound,
)
from evalwf.plan.table import build_plan
from evalwf.plan.timings import measure_dispatch, quantile


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
    # 16 16 | 16 -> 3 x 31 + 2 x 16 = 125 s; lower bound max(234 / 2, 31) = 117 s; first the 3 manifests, 5 s
    # each (the stand-in's documented figure) on 2 workers: 10 s
    assert plan.estimate.manifest_s == 15.0
    assert plan.estimate.span_s == 10.0 + 125.0
    assert plan.estimate.lower_bound_s == 10.0 + 117.0
    assert any("0.5 s per step" in line for line in plan.estimate.assumptions)
    assert {row.priced_by for row in plan.rows} == {ASSUMED}


def test_libero_estimate_is_500_episodes_per_suite_times_its_step_limit(tmp_path):
    config = load_config(REPO / "config" / "libero.yaml", REPO / "config" / "policies" / "standin.yaml")
    config.update(results_dir=str(tmp_path / "r"), manifest_cache=str(tmp_path / "c"))
    plan = build_plan(Campaign(validate_config(config)).single(), seconds_per_step=0.1, workers=1, batch_overhead_s=0.0)
    # (220 + 10) + (280 + 10) + (300 + 10) + (520 + 10) = 1360 steps x 500 episodes x 0.1 s = 68000 s
    assert plan.estimate.simulation_s == pytest.approx(68000.0)
    # one worker, no overhead: the span is the work, after the 40 manifests at LIBERO's documented 150 s each
    assert plan.estimate.span_s == pytest.approx(68000.0 + 40 * 150.0)


def test_measured_durations_take_over_per_task(tmp_path):
    campaign = small_campaign(tmp_path)
    reach, push = TaskRef("standin", "alpha", "reach"), TaskRef("standin", "alpha", "push")
    # reach: finished batches of 2 episodes, 12 s and 16 s -> 7 s per episode on average
    model = CostModel.build(campaign, seconds_per_step=0.5, durations={reach: [(12.0, 2), (16.0, 2)]})
    assert (model.basis(reach), model.seconds_per_episode(reach)) == (MEASURED, 7.0)
    assert model.seconds_per_episode(reach, p90=True) == pytest.approx(6 + 0.9 * 2)  # p90 of 6 and 8 s/episode
    assert model.basis(push) == ASSUMED and model.seconds_per_episode(push) == 30 * 0.5
    last_reach = campaign.task_plan("standin", "alpha", "reach").batches[-1]
    assert expected_batch_cost(model, last_reach) == 7.0  # 1 episode x 7 s


def _earlier_batch(
    root, run: str, suite: str, task: str, label: str, steps: list[int], setup_s: float, started_s: float = 0.0
) -> None:
    """A batch result of an earlier run as the workers write them: episodes of 2 s reset + 0.1 s per step, on one
    worker, started `started_s` after midnight."""
    episodes = [{"index": i, "steps": n, "duration_s": 2.0 + 0.1 * n, "success": n < 30} for i, n in enumerate(steps)]
    path = root / run / "standin" / "batches" / suite / task / f"{label}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"schema": "policy-eval.batch-result", "run": run, "benchmark": "standin", "suite": suite, "task": task}
    duration = sum(e["duration_s"] for e in episodes) + setup_s
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=started_s)
    times = {"started_at": start.isoformat(), "finished_at": (start + timedelta(seconds=duration)).isoformat()}
    worker = {"host": "node1", "gpu": "0", "worker_id": "w0"}
    path.write_text(json.dumps({**record, **times, "worker": worker, "episodes": episodes, "duration_s": duration}))


def test_a_new_run_is_priced_by_the_reset_and_step_times_its_suite_measured_before(tmp_path):
    """Batches of an earlier run of the same suites (other run name, other tasks) price this run's tasks: reset
    and step time fitted over their episodes, the share of the step limit used, the set-up outside episodes."""
    root = tmp_path / "results"
    for index, steps in enumerate(([10, 20, 30, 30], [12, 30, 18, 30], [30, 30, 14, 16])):
        _earlier_batch(root, "earlier", "alpha", "reach", f"{4 * index:04d}-4", steps, 1.5, started_s=100 * index)
    (root / "earlier" / "standin" / "batches" / "alpha" / "reach" / "broken.json").write_text("{not json")
    for index in range(5):  # more batches of that worker, 4 s apart: the dispatch overhead between batches
        _earlier_batch(root, "earlier", "gamma", "close", f"{index:04d}-1", [5], 0.0, started_s=1000 + 6.5 * index)
    campaign = Campaign(validate_config(standin_config(tmp_path, run="bigger"))).single()
    dispatch = measure_dispatch(root, ["standin"])
    # one worker, one run: 7 gaps, 4 of 4 s (2.5 s batches 6.5 s apart), 3 long ones; the median is 4 s
    assert dispatch.gaps == 7 and dispatch.gap_s == pytest.approx(4.0)
    assert "dispatch overhead per batch (p90" in "\n".join(build_plan(campaign, workers=1).estimate.assumptions)
    plan = build_plan(campaign, workers=1, batch_overhead_s=0.0)
    model = CostModel.measure(campaign)
    timing = model.timings[("standin", "alpha")]
    assert timing.episodes == 12 and timing.runs == ("earlier",)
    assert (timing.reset_s, timing.step_s) == (pytest.approx(2.0), pytest.approx(0.1))
    assert timing.setup_s == pytest.approx(1.5)
    push, open_ = TaskRef("standin", "alpha", "push"), TaskRef("standin", "beta", "open")
    # beta was never measured: its episodes take the step and reset times of the benchmark's other suites
    assert model.basis(push) == SUITE_MEASURED and model.basis(open_) == BENCHMARK_MEASURED
    # 6 of 12 succeed (the episodes under 30 steps), using a median 15 of 30 steps; the failures run to the limit
    used = 0.5 * quantile([n / 30 for n in [10, 20, 12, 18, 14, 16]], 0.5) + 0.5
    assert model.seconds_per_episode(push) == pytest.approx(2.0 + 30 * used * 0.1)
    assert model.seconds_per_episode(push, p90=True) >= model.seconds_per_episode(push)
    batch = campaign.task_plan("standin", "alpha", "push").batches[0]
    assert expected_batch_cost(model, batch) == pytest.approx(2 * (2.0 + 30 * used * 0.1) + 1.5)
    assert {row.suite: row.priced_by for row in plan.rows} == {"alpha": SUITE_MEASURED, "beta": BENCHMARK_MEASURED}
    text = "\n".join(plan.estimate.assumptions)
    assert "priced from 12 episode(s) (step limit 30) measured by run(s) earlier: reset 2.00 s, step 0.1 s" in text
    assert "1 task(s) of standin in suites not measured yet priced from its other suites: 17 episode(s)" in text
    # the range and the manifests: 3 manifests to build at the stand-in's documented 5 s each, before the batches
    assert plan.estimate.simulation_s_p90 >= plan.estimate.simulation_s
    assert plan.estimate.manifest_s == 15.0 and plan.estimate.span_s == pytest.approx(15.0 + plan.estimate.simulation_s)


def test_longest_first_list_scheduling_is_the_textbook_lpt():
    # Graham's example: LPT gives 7 where 6 is possible (3+3 | 2+2+2); within its 4/3 - 1/6 bound
    assert list_schedule_span([2, 3, 2, 3, 2], workers=2) == 7
    assert span_lower_bound([2, 3, 2, 3, 2], workers=2) == 6
    assert list_schedule_span([5, 1, 1], workers=8) == 5  # more workers than units
    assert list_schedule_span([], workers=3) == 0.0
    with pytest.raises(ValueError):
        list_schedule_span([1.0], workers=0)
