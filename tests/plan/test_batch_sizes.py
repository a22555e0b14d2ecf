"""`batch_size: {auto: ...}`: the sizing rule (every task's episodes once, within bounds, large first and episode-sized
at the end, the same every time), its config checks, and its resumability: batches keep their names when measured
results would price the tasks differently."""

from __future__ import annotations

import heapq
import json
import random
import statistics
from pathlib import Path

import pytest
from conftest import REPO, standin_config

from evalwf.benchmark.adapter import CostFigures, get_adapter
from evalwf.common.errors import ConfigError
from evalwf.plan.batch_sizes import AutoBatchSize, factoring_sizes
from evalwf.plan.campaign import Campaign, PolicyCampaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.cost import CostModel, list_schedule_span

# bench_scheduling's long-tailed campaign: seconds per episode of its 7 tasks (RoboTwin step limits x 0.004)
LONG_TAIL = (1.6, 1.6, 2.0, 2.8, 3.6, 4.8, 6.8)
RULES = [
    AutoBatchSize(4, 1, None),
    AutoBatchSize(4, 2, None),
    AutoBatchSize(4, 1, 3),
    AutoBatchSize(3, 3, 4),
    AutoBatchSize(32, 1, None),
    AutoBatchSize(1, 1, None),
]


def auto(workers: int, **bounds: int | None) -> dict[str, dict[str, int | None]]:
    return {"auto": {"workers": workers, **bounds}}


def planned(config: dict) -> PolicyCampaign:
    return Campaign(validate_config(config)).single()


def labels(campaign: PolicyCampaign) -> list[str]:
    return [batch.path for batch in campaign.batches()]


@pytest.mark.parametrize("rule", RULES, ids=str)
@pytest.mark.parametrize("episodes", [1, 5, 12, 50])
def test_every_task_is_cut_into_sizes_that_sum_to_its_episodes_within_the_bounds(rule, episodes):
    sizes = factoring_sizes([(episodes, cost) for cost in LONG_TAIL], rule)
    for task in sizes:
        assert sum(task) == episodes
        assert task == sorted(task, reverse=True), "large first"
        assert rule.largest is None or max(task) <= rule.largest
        # below min only the last, where the episodes do not divide
        assert all(size >= rule.smallest for size in task[:-1])
        assert task[-1] >= min(rule.smallest, episodes) or len(task) > 1


def test_large_batches_first_and_episode_sized_ones_at_the_end():
    rule = AutoBatchSize(4, 1, None)
    sizes = factoring_sizes([(12, cost) for cost in LONG_TAIL], rule)
    costs = sorted((size * cost for task, cost in zip(sizes, LONG_TAIL, strict=True) for size in task), reverse=True)
    assert costs[0] >= 0.9 * sum(costs) / (2 * rule.workers), "the first round takes about half the work"
    assert min(size for task in sizes for size in task) == 1
    assert costs[-rule.workers :] == sorted(costs[-rule.workers :], reverse=True)
    assert max(costs[-rule.workers :]) <= max(LONG_TAIL), "the last round is one episode each"


def longest_first_efficiency(expected: list[float], workers: int, overhead: float, rng: random.Random) -> float:
    """Work / (workers x span) of longest-first by expected cost, each batch taking expected x U[0.5, 1] (episodes
    that succeed stop early) + `overhead`."""
    actual = [cost * rng.uniform(0.5, 1.0) for cost in expected]
    free = [0.0] * workers
    for index in sorted(range(len(expected)), key=lambda i: -expected[i]):
        heapq.heappush(free, heapq.heappop(free) + actual[index] + overhead)
    return sum(actual) / (workers * max(free))


def test_on_the_long_tailed_campaign_auto_keeps_4_workers_busier_than_any_fixed_size():
    """Simulated (seeded) with durations that vary as episodes do and 0.2 s dispatch per batch: the median efficiency
    of auto beats batches of 6, 4, 3, 2 and 1; with equal durations, batches of 3 fit exactly and auto is near."""
    sizes = factoring_sizes([(12, cost) for cost in LONG_TAIL], AutoBatchSize(4, 1, None))
    plans = {"auto": [size * cost for task, cost in zip(sizes, LONG_TAIL, strict=True) for size in task]}
    plans |= {str(fixed): [fixed * cost for cost in LONG_TAIL for _ in range(12 // fixed)] for fixed in (6, 4, 3, 2, 1)}
    medians = {}
    for name, expected in plans.items():
        rng = random.Random(5)
        medians[name] = statistics.median(longest_first_efficiency(expected, 4, 0.2, rng) for _ in range(100))
    assert all(medians["auto"] > medians[name] for name in plans if name != "auto"), medians
    assert medians["auto"] >= 0.96, medians
    assert len(plans["auto"]) < len(plans["3"])
    work = sum(plans["auto"])
    assert work / (4 * list_schedule_span(plans["auto"], 4)) >= 0.99


def test_the_same_tasks_give_the_same_sizes_and_scaling_every_cost_changes_nothing():
    tasks = [(50, cost) for cost in LONG_TAIL]
    rule = AutoBatchSize(8, 1, 10)
    assert factoring_sizes(tasks, rule) == factoring_sizes(list(tasks), rule)
    assert factoring_sizes([(n, cost * 37.5) for n, cost in tasks], rule) == factoring_sizes(tasks, rule)


@pytest.mark.parametrize("rule", [AutoBatchSize(0, 1, None), AutoBatchSize(4, 0, None), AutoBatchSize(4, 5, 4)])
def test_a_rule_out_of_its_bounds_is_refused(rule):
    with pytest.raises(ValueError, match="bad batch size rule"):
        factoring_sizes([(5, 1.0)], rule)


def test_auto_plans_each_task_consecutively_from_episode_0(tmp_path):
    campaign = planned(standin_config(tmp_path, standin={"episodes_per_task": 12, "batch_size": auto(2)}))
    for plan in campaign.tasks:
        indices = [i for batch in plan.batches for i in batch.episodes.indices()]
        assert indices == list(range(12))
        assert [b.episodes.count for b in plan.batches] == sorted(
            (b.episodes.count for b in plan.batches), reverse=True
        )
    assert len({b.episodes.count for b in campaign.batches()}) > 1, "a rule that planned equal batches tests nothing"
    assert labels(campaign) == labels(
        planned(standin_config(tmp_path, standin={"episodes_per_task": 12, "batch_size": auto(2)}))
    )


def _measured_run(results: Path, campaign: PolicyCampaign) -> None:
    """Batch records of the campaign's suite alpha as a finished run writes them, saying that its episodes succeed
    after one step of ten (cheap), while beta, measured nowhere, is priced at its limit by the same step time."""
    for batch in campaign.batches():
        if batch.ref.suite != "alpha":
            continue
        episodes = [
            {"index": i, "steps": 1, "duration_s": 0.05, "success": True, "extra": {"max_steps": 30}}
            for i in batch.episodes.indices()
        ]
        record = {
            "schema": "policy-eval.batch-result",
            "run": "t",
            "benchmark": "standin",
            "suite": "alpha",
            "task": batch.ref.task,
            "duration_s": 0.05 * len(episodes),
            "episodes": episodes,
        }
        path = Path(batch.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    assert results.exists()


def test_measured_results_do_not_rename_the_batches_of_a_finished_campaign(tmp_path):
    """Re-planning after the run measured its suites gives the same batch names, although sizing by the measured
    figures would give others (which is what this test would catch)."""
    section = {"episodes_per_task": 12, "batch_size": auto(2), "suites": {"alpha": ["reach", "push"], "beta": ["open"]}}
    config = standin_config(tmp_path, standin=section)
    before = planned(config)
    _measured_run(tmp_path / "results", before)
    after = planned(config)
    assert labels(after) == labels(before)
    model = CostModel.measure(after)
    assert {model.basis(plan.ref) for plan in after.tasks} == {"suite measured", "benchmark measured"}
    measured = [(12, model.seconds_per_episode(plan.ref)) for plan in after.tasks]
    by_measured = factoring_sizes(measured, AutoBatchSize(2, 1, None))
    assert by_measured != [[b.episodes.count for b in plan.batches] for plan in after.tasks]


@pytest.mark.parametrize(
    ("batch_size", "facts"),
    [
        ("auto", ["'benchmarks.standin.batch_size'", "{auto: {workers: W}}"]),
        ({"auto": {}}, ["'workers' is a required property", "{auto: {workers: W}}"]),
        ({"auto": {"workers": 4, "min": 13}}, ["'benchmarks.standin.batch_size.auto.min'", "13", "(12)"]),
        (
            {"auto": {"workers": 4, "min": 3, "max": 2}},
            ["'benchmarks.standin.batch_size.auto.max'", "less than its min"],
        ),
        ({"auto": {"workers": 4, "size": 2}}, ["'benchmarks.standin.batch_size", "size"]),
    ],
)
def test_a_bad_auto_block_is_refused_naming_the_key_and_the_forms(tmp_path, batch_size, facts):
    with pytest.raises(ConfigError) as refused:
        validate_config(standin_config(tmp_path, standin={"episodes_per_task": 12, "batch_size": batch_size}))
    message = str(refused.value)
    assert all(fact in message for fact in facts), message


def test_auto_fills_its_bounds_from_the_schema(tmp_path):
    campaign = Campaign(validate_config(standin_config(tmp_path, standin={"batch_size": auto(3)})))
    assert AutoBatchSize.of(campaign.settings("standin").batch_size) == AutoBatchSize(3, 1, None)


def test_revising_a_benchmarks_documented_figures_renames_no_batch(tmp_path, monkeypatch):
    """The figures are conservative guesses a later commit may revise (docs/performance.md): a campaign resumed on
    that commit must find its batches. Only the step limits and the config size them."""
    shipped = [REPO / "config" / name for name in ("libero.yaml", "policies/standin.yaml")]
    where = {"results_dir": str(tmp_path / "results"), "manifest_cache": str(tmp_path / "cache")}
    config = load_config(*shipped, overrides={**where, "benchmarks": {"libero": {"batch_size": auto(32)}}})
    before = labels(Campaign(config).single())
    adapter = type(get_adapter("libero"))
    monkeypatch.setattr(adapter, "cost_figures", CostFigures(step_s=0.1, reset_s=60.0, manifest_s=97.0))
    assert labels(Campaign(config).single()) == before
    assert len({label.rsplit("/", 1)[-1].split("-")[1] for label in before}) > 2, "auto planned several sizes"
