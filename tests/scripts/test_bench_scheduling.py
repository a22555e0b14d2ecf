"""The scheduling benchmark's own arithmetic: where the workers' time went (its parts add up to workers x span, an
idle worker counted whole) and the projection's limits of the finest plan. Pure functions: the benchmark itself is
run by hand (docs/performance.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from scriptkit import load_script

REPO = Path(__file__).resolve().parents[2]


scheduling = load_script("bench_scheduling")


def batch(claimed: float, started: float, ended: float, finished: float) -> dict[str, float]:
    return {"claimed": claimed, "step_started": started, "step_finished": ended, "finished": finished}


def test_the_workers_time_is_cut_into_parts_that_add_up_to_workers_times_span():
    lanes = [
        [batch(5.0, 5.5, 9.5, 9.75), batch(1.0, 2.0, 4.0, 4.25)],  # out of order: sorted by claim
        [batch(0.5, 1.0, 11.0, 11.5)],
    ]
    parts = scheduling.worker_time(lanes, 3, 0.0, 12.0)
    assert parts == {
        "before_first_claim": 1.0 + 0.5,
        "start": 1.0 + 0.5 + 0.5,
        "evaluation": 2.0 + 4.0 + 10.0,
        "end": 0.25 + 0.25 + 0.5,
        "between": 5.0 - 4.25,
        "after_last": 12.0 + (12.0 - 9.75) + (12.0 - 11.5),  # the third worker ran nothing
    }
    assert sum(parts.values()) == pytest.approx(3 * 12.0)


def test_the_finest_plans_limits_remove_one_assumption_at_a_time():
    """Units that divide evenly among the GPUs: without variation and overhead nothing is lost; each assumption put
    back loses something, and ordering by the actual durations is never worse than by the expected ones."""
    costs = [10.0] * 8 + [4.0] * 8
    exact = scheduling.longest_first(costs, 4, 0.0, random.Random(1), 5, shortest_factor=1.0)
    assert exact == [1.0] * 5
    limits = scheduling.finest_limits(costs, 4, 0.5, seed=3, trials=30)
    assert limits["share_per_gpu_s"] == 28.0 and limits["shortest_unit_s"] == 4.0
    assert limits["as_projected"] < limits["no_dispatch_overhead"] < 1.0
    assert limits["as_projected"] < limits["no_variation"] < 1.0
    assert limits["ordered_by_actual"] >= limits["as_projected"]


def test_the_fixed_cost_model_starts_every_worker_late_charges_each_batch_and_waits_for_the_notice():
    # longest first on 2 workers: 4 -> worker 0 (ends 1 + 4.5), 3 -> worker 1 (4.5), 3 -> worker 1 (8.0)
    assert scheduling.fixed_cost_model([3.0, 4.0, 3.0], 2, 1.0, 0.5, 0.5) == pytest.approx(10 / (2 * 8.5))
    assert scheduling.fixed_cost_model([5.0, 5.0], 2, 0.0, 0.0, 0.0) == 1.0


def test_the_projection_prices_from_the_records_it_is_given_and_none_by_default(tmp_path):
    """A checkout's results/ (after `make demo`, say) must not change the documented projection: it is priced from
    an empty results directory unless --prices-from names one, which then prices as `evalwf plan` does."""
    from costkit import record_batch

    empty = tmp_path / "empty"
    conservative, bases = scheduling.priced_batches(None, empty)
    assert bases == {"conservative"}
    record_batch(tmp_path, "libero_spatial", 0, [(220, False)] * 3, 220, 0.05)
    measured, bases = scheduling.priced_batches(None, tmp_path / "results")
    assert "conservative" not in bases or len(bases) > 1, bases
    assert len(measured) == len(conservative) and min(measured) < min(conservative)
