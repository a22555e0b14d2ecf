"""Planned vs took: the plan's GPU-hours recorded when a campaign is submitted, compared at its end with what its
batch records took; and an adaptive sweep priced at its expected rounds, the full sweep as the upper bound."""

from __future__ import annotations

import json

import pytest
from conftest import missing_facts, standin_config, write_config
from runkit import fabricate_run, sweep_config

from evalwf.cli.main import main
from evalwf.plan.budget import (
    campaign_cost_line,
    planned_path,
    price_campaign,
    read_planned_cost,
    record_planned_cost,
)
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.plan.rounds import expected_batch_weights, round_probabilities
from evalwf.plan.table import build_plan, render_text


def test_a_finished_run_is_compared_with_the_plan_recorded_at_submission_not_a_plan_made_now(tmp_path):
    campaign = Campaign(validate_config(standin_config(tmp_path)))
    # nothing measured: the stand-in's documented 0.01 s a step, 15 episodes x 30 steps = 4.5 s
    planned = record_planned_cost(campaign, planned_path(campaign))
    assert planned.gpu_hours == pytest.approx(4.5 / 3600) and (planned.batches, planned.batches_done) == (9, 0)
    assert read_planned_cost(campaign) == planned
    fabricate_run(tmp_path, lambda suite, task, index: True)  # 9 batch records of 5 s each: 45 s took
    assert price_campaign(campaign).gpu_hours == pytest.approx(45 / 3600)  # a plan made now knows what it took
    line = campaign_cost_line(campaign)
    assert not missing_facts(line, "planned 0.00125 GPU-h", "took 0.0125 GPU-h", "(10.00)"), line


def test_a_run_without_a_recorded_plan_says_so_and_still_shows_what_it_took(tmp_path):
    campaign = fabricate_run(tmp_path, lambda suite, task, index: True, skip={"open/0004-1"})
    whole = Campaign(validate_config(campaign.config))
    assert campaign_cost_line(whole).startswith("planned: not recorded")
    planned_path(whole).write_text('{"schema": "something else"}', encoding="utf-8")
    assert read_planned_cost(whole) is None
    line = campaign_cost_line(whole)
    assert not missing_facts(line, "planned: not recorded", "before plans were recorded", "took 0.0111 GPU-h"), line
    assert "(8 batches)" in line, "what it took counts the batches found, not the 9 planned"


def test_evalwf_plan_of_a_finished_run_shows_planned_and_took(tmp_path, capsys):
    config = standin_config(tmp_path)
    record_planned_cost(Campaign(validate_config(config)), tmp_path / "results" / "t" / "planned_cost.json")
    fabricate_run(tmp_path, lambda suite, task, index: index % 2 == 0)
    configfile = write_config(tmp_path / "c.yaml", config)
    assert main(["plan", "--configfile", str(configfile)]) == 0
    out = capsys.readouterr().out
    assert "Cost of run t: planned 0.00125 GPU-h, took 0.0125 GPU-h (10.00)" in out
    assert main(["plan", "--configfile", str(configfile), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["planned_vs_took"].startswith("planned 0.00125 GPU-h, took 0.0125")


def adaptive_sweep(tmp_path, drop: str) -> Campaign:
    # 10 episodes a task in rounds of 2 (5 rounds), no decision before 4 episodes: the first can drop after round 1
    config = sweep_config(tmp_path, ["a", "b"], standin={"episodes_per_task": 10, "batch_size": 2})
    config["adaptive"] = {"round_episodes": 2, "min_episodes": 4, "drop": drop}
    return Campaign(validate_config(config))


def test_an_adaptive_sweep_is_priced_at_its_expected_rounds_with_the_full_sweep_as_upper_bound(tmp_path):
    campaign = adaptive_sweep(tmp_path, "worse-than-best")
    # a droppable policy surely runs rounds 0 and 1, then stops after round 1, 2, 3 or 4 with equal chance (it
    # evaluates round r with chance (5 - r) / 4); one of the 2 is the best (chance 1/2) and runs every round
    droppable = [1, 1, 0.75, 0.5, 0.25]
    expected = [0.5 + 0.5 * p for p in droppable]
    assert round_probabilities(campaign, "standin") == {"a": expected, "b": expected}
    weights = expected_batch_weights(campaign)
    plans = [build_plan(member, weights=weights, workers=1) for member in campaign.policy_campaigns()]
    for plan in plans:  # every round costs the same here: expected / full = the mean chance
        assert plan.estimate.campaign_simulation_s == pytest.approx(plan.estimate.campaign_upper_s * sum(expected) / 5)
        assert "full sweep" in render_text(plan) and "adaptive sweep: each batch priced" in render_text(plan)
    planned = price_campaign(campaign)
    assert planned.gpu_hours == pytest.approx(planned.full_sweep_gpu_hours * 0.85)


def test_worse_than_baseline_runs_the_baseline_in_full_and_prices_the_others_as_droppable(tmp_path):
    chances = round_probabilities(adaptive_sweep(tmp_path, "worse-than-baseline"), "standin")
    assert chances == {"a": [1.0] * 5, "b": [1, 1, 0.75, 0.5, 0.25]}  # a: the first policy, the baseline
