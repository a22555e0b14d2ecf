"""Which policies surely continue past the next decision, whatever the coming round's outcomes: the bound is
checked against every outcome sequence of small cases (brute force), and against the real decision (a certified
policy is never dropped); the bet is the aGRAPA of the running mean and variance, rewritten in the sums it uses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from evalwf.report.sequential import (
    PRIOR_WEIGHT,
    bet_sizes,
    decide,
    largest_null_log_e_values,
    log_capital,
    log_threshold,
    surely_continuing,
)


def agrapa_from_mean_and_variance(differences: np.ndarray, margin: float, sign: float) -> np.ndarray:
    """The bet as Waudby-Smith and Ramdas write it: edge / (variance + edge^2) of the earlier cycles, with
    PRIOR_WEIGHT pseudo-episodes at mean `margin` and variance 1/4."""
    cycles = differences.shape[0]
    bets = np.zeros(cycles)
    for cycle in range(cycles):
        seen = differences[:cycle].ravel()
        count = seen.size + PRIOR_WEIGHT
        mean = (seen.sum() + PRIOR_WEIGHT * margin) / count
        variance = (np.sum(seen * seen) + PRIOR_WEIGHT * (margin * margin + 0.25)) / count - mean * mean
        edge = sign * (mean - margin)
        bets[cycle] = min(max(edge / (variance + edge * edge), 0.0), 0.5 / max(1.0 + sign * margin, 0.5))
    return bets


@pytest.mark.parametrize("margin", [0.0, 0.05, 0.3, -0.4])
def test_the_bet_is_agrapa_of_the_running_mean_and_variance(margin):
    rng = np.random.default_rng(11)
    for _ in range(20):
        differences = rng.choice([-1.0, 0.0, 1.0], size=(12, 4), p=rng.dirichlet(np.ones(3)))
        for sign in (1.0, -1.0):
            expected = agrapa_from_mean_and_variance(differences, margin, sign)
            np.testing.assert_allclose(bet_sizes(differences, margin, sign), expected, rtol=1e-12, atol=1e-12)


def every_continuation(history: np.ndarray, cycles: int) -> np.ndarray:
    """History (c, T) followed by every possible outcome of `cycles` more cycles: (3^(cycles*T), c + cycles, T)."""
    tasks = history.shape[1]
    futures = np.array(list(itertools.product((-1.0, 0.0, 1.0), repeat=cycles * tasks))).reshape(-1, cycles, tasks)
    return np.concatenate([np.broadcast_to(history, (len(futures), *history.shape)), futures], axis=1)


@pytest.mark.parametrize(("tasks", "cycles"), [(1, 5), (2, 3), (3, 2)])
@pytest.mark.parametrize("margin", [0.0, 0.05, 0.45, 0.9])
def test_no_outcome_of_the_coming_cycles_grows_the_capital_more_than_all_successes(tasks, cycles, margin):
    """Brute force: every outcome sequence of the coming cycles (up to 3^6 = 729), after histories that lean
    either way. The largest capital is the all-success one, which `largest_null_log_e_values` reports."""
    rng = np.random.default_rng(12)
    for length in (0, 1, 3, 6):
        for lean in ([0.6, 0.3, 0.1], [0.1, 0.3, 0.6], [0.2, 0.6, 0.2]):
            history = rng.choice([-1.0, 0.0, 1.0], size=(length, tasks), p=lean)
            final = log_capital(every_continuation(history, cycles), margin)[:, -1]
            # the same history as the outcomes of two policies: the better one succeeds where D = 1
            better, worse = (history > 0).astype(float), (history < 0).astype(float)
            largest = largest_null_log_e_values(
                {"j": better, "i": worse}, ["j", "i"], cycles, drop="worse-than-baseline", margin=margin, baseline="j"
            )[1]
            assert final.max() == pytest.approx(largest, abs=1e-12)
            assert (final <= largest + 1e-12).all()


def random_sweep(rng: np.random.Generator, rates: list[float], cycles: int, tasks: int) -> dict[str, np.ndarray]:
    return {f"p{index}": (rng.uniform(size=(cycles, tasks)) < rate).astype(float) for index, rate in enumerate(rates)}


@pytest.mark.parametrize(
    ("drop", "margin"),
    [("worse-than-best", 0.0), ("worse-than-best", 0.05), ("worse-than-baseline", 0.0), ("worse-than-baseline", 0.1)],
)
def test_the_decision_never_drops_a_certified_policy_and_the_bound_is_reached(drop, margin):
    """Random sweeps, certified after some rounds; then the coming round's outcomes: random ones, ones that favour
    everyone but the certified policy, and the extreme one (every other racing policy succeeds where it fails),
    under which the real decision's e-value is the bound itself. Dropped policies stay stopped."""
    rng = np.random.default_rng(13)
    tasks, coming, alpha = 3, 4, 0.1
    certified_some = uncertified_some = 0
    for trial in range(60):
        rates = list(rng.uniform(0.2, 0.9, size=4))
        cycles = int(rng.integers(0, 12))
        outcomes = random_sweep(rng, rates, cycles, tasks)
        racing = list(outcomes)
        if trial % 3 == 0 and cycles > 2:  # one left the race earlier: its outcomes stop there
            outcomes["p3"], racing = outcomes["p3"][: cycles - 2], ["p0", "p1", "p2"]
        settings = {"alpha": alpha, "drop": drop, "margin": margin, "baseline": "p0"}
        sure = surely_continuing(outcomes, racing, coming, **settings)
        largest = largest_null_log_e_values(outcomes, racing, coming, drop=drop, margin=margin, baseline="p0")
        certified_some += len(sure)
        uncertified_some += len(racing) - len(sure)
        futures = [random_sweep(rng, list(rng.uniform(0, 1, size=4)), coming, tasks) for _ in range(30)]
        for name in sure:
            against = {other: np.ones((coming, tasks)) for other in outcomes}
            against[name] = np.zeros((coming, tasks))
            futures.append(against)
        for future in futures:
            after = {
                name: np.concatenate([array, future[name]]) if name in racing else array
                for name, array in outcomes.items()
            }
            verdicts = decide(after, racing, **settings)
            assert not any(verdicts[name].drop for name in sure if name in verdicts), (trial, sure)
        for name in racing:  # the extreme outcome for `name` reaches its bound
            if drop == "worse-than-baseline" and name == "p0":
                continue
            extreme = {
                other: np.concatenate([array, np.full((coming, tasks), float(other != name))])
                if other in racing
                else array
                for other, array in outcomes.items()
            }
            reached = decide(extreme, racing, **settings)[name].log_e_value
            assert reached == pytest.approx(largest[list(outcomes).index(name)], abs=1e-9)
    assert certified_some and uncertified_some, "the cases must hold policies of both kinds"


def test_before_any_data_only_the_baseline_or_nobody_is_certified_and_bad_input_is_refused():
    empty = {name: np.zeros((0, 10)) for name in ("a", "b", "c")}
    settings = {"alpha": 0.05, "margin": 0.0, "baseline": "a"}
    assert surely_continuing(empty, list(empty), 5, drop="worse-than-best", **settings) == []
    assert surely_continuing(empty, list(empty), 5, drop="worse-than-baseline", **settings) == ["a"]
    # one cycle ahead, nothing known: the first bet is 0, so nothing can be lost or won
    assert surely_continuing(empty, list(empty), 1, drop="worse-than-best", **settings) == ["a", "b", "c"]
    assert math.log(3 / 0.05) == log_threshold("worse-than-best", 3, 0.05)
    uneven = {"a": np.zeros((3, 2)), "b": np.zeros((2, 2))}
    with pytest.raises(ValueError, match="same cycles"):
        surely_continuing(uneven, ["a", "b"], 2, drop="worse-than-best", **settings)
