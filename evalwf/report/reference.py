"""Compare reproduced success rates with the scores a paper reports (config key `reference`)."""

from __future__ import annotations

import math

import pandas as pd

from evalwf.report.stats import TaskTally, wilson_interval


def suite_rates(tallies: list[TaskTally]) -> dict[str, tuple[int, int]]:
    """suite -> (successes, episodes), pooled over its tasks."""
    rates: dict[str, tuple[int, int]] = {}
    for tally in tallies:
        successes, episodes = rates.get(tally.suite, (0, 0))
        rates[tally.suite] = (successes + tally.successes, episodes + tally.episodes)
    return rates


def compare_with_reference(benchmark: str, tallies: list[TaskTally], reported: dict[str, float]) -> pd.DataFrame:
    """One row per reported suite (and 'average'): reported vs reproduced, in percent, with the difference in
    percentage points; `outside_ci` flags a reported score outside the reproduction's 95% Wilson interval."""
    rates = suite_rates(tallies)
    rows = []
    for suite, reported_pct in reported.items():
        if suite == "average":
            per_suite = [s / n for s, n in rates.values() if n]
            reproduced = 100 * sum(per_suite) / len(per_suite) if per_suite else math.nan
            low = high = math.nan
            sizes = {n for _, n in rates.values()}
            if len(sizes) == 1 and 0 not in sizes:  # equal suites: the mean of rates is the pooled rate
                pooled = wilson_interval(sum(s for s, _ in rates.values()), sum(n for _, n in rates.values()))
                low, high = (100 * v for v in pooled)
        elif suite in rates:
            successes, episodes = rates[suite]
            reproduced = 100 * successes / episodes if episodes else math.nan
            low, high = (100 * v for v in wilson_interval(successes, episodes))
        else:
            continue
        outside = bool(not math.isnan(low) and not low <= reported_pct <= high)
        rows.append(
            {
                "benchmark": benchmark,
                "suite": suite,
                "reported_pct": float(reported_pct),
                "reproduced_pct": reproduced,
                "difference_pp": reproduced - float(reported_pct),
                "ci95_low_pct": low,
                "ci95_high_pct": high,
                "outside_ci": outside if not math.isnan(low) else "",
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "benchmark",
            "suite",
            "reported_pct",
            "reproduced_pct",
            "difference_pp",
            "ci95_low_pct",
            "ci95_high_pct",
            "outside_ci",
        ],
    )
