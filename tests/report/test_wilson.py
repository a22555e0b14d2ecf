import math

import pytest

from evalwf.report.aggregate import wilson_interval


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        # Reference values (Wilson score interval, z = 1.96), e.g. statsmodels proportion_confint(method="wilson").
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (45, 50, 0.7864, 0.9565),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_wilson_interval_known_values(successes, trials, low, high):
    got_low, got_high = wilson_interval(successes, trials)
    assert got_low == pytest.approx(low, abs=1e-4)
    assert got_high == pytest.approx(high, abs=1e-4)


def test_wilson_interval_no_trials():
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_average_row_interval_only_when_suites_are_equal():
    from evalwf.report.aggregate import TaskTally, suite_table

    equal = suite_table(
        "standin", [TaskTally("alpha", "reach", 10, 7, 1, 1, 10), TaskTally("beta", "open", 10, 5, 1, 1, 10)]
    )
    average = equal[equal.suite == "average"].iloc[0]
    assert average.success_rate == pytest.approx(0.6)
    assert (average.ci95_low, average.ci95_high) == pytest.approx(wilson_interval(12, 20))
    unequal = suite_table(
        "standin", [TaskTally("alpha", "reach", 10, 7, 1, 1, 10), TaskTally("beta", "open", 4, 1, 1, 1, 4)]
    )
    assert math.isnan(unequal[unequal.suite == "average"].iloc[0].ci95_low)


def test_wilson_interval_is_exact_at_the_ends_and_holds_the_rate():
    """0/n has a lower bound of exactly 0 and n/n an upper bound of exactly 1, for every n (the closed form left
    residues such as 6.9e-18 for 0/50 and 0.9999999999999999 for 10/10, which crashed the plot)."""
    for trials in range(1, 201):
        for successes in range(trials + 1):
            low, high = wilson_interval(successes, trials)
            rate = successes / trials
            assert 0.0 <= low <= rate <= high <= 1.0, (successes, trials, low, high)
            assert (low == 0.0) == (successes == 0), (successes, trials, low)
            assert (high == 1.0) == (successes == trials), (successes, trials, high)


def test_wilson_interval_rejects_impossible_counts():
    with pytest.raises(ValueError, match="3 successes out of 2"):
        wilson_interval(3, 2)
