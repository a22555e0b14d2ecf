"""The anytime-valid statistics of adaptive sweeps: validity under continuous monitoring (checked by simulation,
not by trusting the derivation), power against a clearly worse policy, predictable bets, the multiplicity
correction, and the decision rules' guards (baseline kept, never the whole race dropped)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalwf.report.sequential import (
    LAMBDA_CAP,
    bet_sizes,
    confidence_sequence,
    decide,
    log_capital,
    log_threshold,
    null_log_e_values,
    pairwise_log_capital,
    stopped_log_e_values,
)


def bernoulli(rng: np.random.Generator, rates: np.ndarray, cycles: int, tasks: int) -> np.ndarray:
    """0/1 outcomes (..., policies, cycles, tasks) with success rate rates[..., policy] on every task."""
    rates = np.asarray(rates, dtype=float)
    return (rng.uniform(size=(*rates.shape, cycles, tasks)) < rates[..., None, None]).astype(float)


def test_the_capital_crosses_one_over_alpha_at_most_alpha_of_the_time_under_the_null():
    """Ville's inequality, checked: two equal policies, monitored after EVERY cycle (the most peeking there is)."""
    rng = np.random.default_rng(1)
    alpha = 0.1
    outcomes = bernoulli(rng, np.full((4000, 2), 0.5), cycles=60, tasks=5)
    differences = outcomes[:, 0] - outcomes[:, 1]
    crossed = (log_capital(differences, 0.0) >= math.log(1 / alpha)).any(axis=-1)
    assert crossed.mean() <= alpha, crossed.mean()


def test_the_null_with_a_margin_holds_for_a_policy_worse_by_less_than_the_margin():
    """H0: delta <= m. A policy 5 pp worse, tested with a 10 pp margin, is a null: it must rarely be rejected,
    even with per-task differences that vary (the tasks' mean is what the null is about)."""
    rng = np.random.default_rng(2)
    alpha = 0.05
    better = np.array([0.9, 0.6, 0.3, 0.75])  # per task
    worse = better - np.array([0.15, 0.0, 0.05, 0.0])  # 5 pp worse on the task mean
    x = (rng.uniform(size=(3000, 80, 4)) < better).astype(float)
    y = (rng.uniform(size=(3000, 80, 4)) < worse).astype(float)
    crossed = (log_capital(x - y, 0.10) >= math.log(1 / alpha)).any(axis=-1)
    assert crossed.mean() <= alpha, crossed.mean()


def test_the_capital_grows_against_a_clearly_worse_policy():
    rng = np.random.default_rng(3)
    outcomes = bernoulli(rng, np.array([0.8, 0.3]), cycles=30, tasks=10)
    capital = log_capital(outcomes[0] - outcomes[1], 0.0)
    assert capital[-1] > math.log(10 / 0.05)  # decisive after 300 paired episodes
    assert log_capital(outcomes[1] - outcomes[0], 0.0)[-1] <= 0.0  # betting the wrong way never gains


def test_bets_are_predictable_and_bounded():
    """A cycle's bet depends on earlier cycles only, and no factor drops below 1 - LAMBDA_CAP."""
    rng = np.random.default_rng(4)
    differences = rng.choice([-1.0, 0.0, 1.0], size=(20, 6), p=[0.1, 0.4, 0.5])
    changed = differences.copy()
    changed[10:] = -1.0
    for margin in (0.0, 0.3, -0.5, 0.99):
        for sign in (1.0, -1.0):
            bets = bet_sizes(differences, margin, sign)
            np.testing.assert_array_equal(bets[:11], bet_sizes(changed, margin, sign)[:11])
            assert (bets >= 0).all()
            worst = 1.0 - bets * max(1.0 + sign * margin, 0.0)
            assert (worst >= 1.0 - LAMBDA_CAP - 1e-12).all()
    assert bet_sizes(differences, 0.0)[0] == 0.0  # nothing known yet: no bet


def test_bad_differences_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="NaN"):
        log_capital(np.array([[1.0, math.nan]]), 0.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        log_capital(np.array([[2.0, 0.0]]), 0.0)
    with pytest.raises(ValueError, match="cycles, tasks"):
        log_capital(np.array([1.0, 0.0]), 0.0)
    with pytest.raises(ValueError, match="worse-than-best, worse-than-baseline"):
        log_threshold("worst", 3, 0.05)


def test_the_threshold_counts_the_nulls_tested():
    assert log_threshold("worse-than-baseline", 5, 0.05) == pytest.approx(math.log(4 / 0.05))
    assert log_threshold("worse-than-best", 5, 0.05) == pytest.approx(math.log(5 / 0.05))


def test_a_stopped_comparison_keeps_its_value_at_the_last_shared_cycle():
    rng = np.random.default_rng(5)
    outcomes = bernoulli(rng, np.array([0.9, 0.2, 0.5]), cycles=12, tasks=3)
    pairwise = pairwise_log_capital(outcomes, 0.0)
    assert pairwise.shape == (3, 3, 12) and not pairwise[[0, 1, 2], [0, 1, 2]].any()
    stopped = stopped_log_e_values(pairwise, np.array([12, 4, 12]))
    assert stopped[0, 1] == pairwise[0, 1, 3] and stopped[1, 0] == pairwise[1, 0, 3]
    assert stopped[0, 2] == pairwise[0, 2, 11]
    # what a dropped policy's unevaluated cycles hold never matters
    scrambled = outcomes.copy()
    scrambled[1, 4:] = 1.0 - scrambled[1, 4:]
    again = stopped_log_e_values(pairwise_log_capital(scrambled, 0.0), np.array([12, 4, 12]))
    np.testing.assert_array_equal(stopped, again)
    assert stopped_log_e_values(pairwise, np.array([0, 4, 12]))[0, 1] == 0.0


def test_worse_than_best_is_the_mean_of_the_challengers_e_values():
    stopped = np.log(np.array([[1.0, 30.0, 2.0], [0.5, 1.0, 1.0], [4.0, 10.0, 1.0]]))
    log_e = null_log_e_values(stopped, "worse-than-best", baseline=0)
    np.testing.assert_allclose(np.exp(log_e), [(0.5 + 4.0) / 2, (30.0 + 10.0) / 2, (2.0 + 1.0) / 2])
    np.testing.assert_allclose(null_log_e_values(stopped, "worse-than-baseline", 0), np.log([1.0, 30.0, 2.0]))


def sweep(rng: np.random.Generator, rates: list[float], cycles: int = 40, tasks: int = 8) -> dict[str, np.ndarray]:
    outcomes = bernoulli(rng, np.array(rates), cycles, tasks)
    return {f"p{index}": outcomes[index] for index in range(len(rates))}


def test_decide_drops_the_clearly_worse_and_keeps_the_best():
    outcomes = sweep(np.random.default_rng(6), [0.85, 0.2, 0.8, 0.15])
    verdicts = decide(outcomes, list(outcomes), alpha=0.05, drop="worse-than-best", margin=0.0, baseline="p0")
    assert {name for name, verdict in verdicts.items() if verdict.drop} == {"p1", "p3"}
    assert verdicts["p1"].strongest in ("p0", "p2") and verdicts["p1"].e_value >= 4 / 0.05
    assert not verdicts["p0"].drop and verdicts["p0"].log_e_value < verdicts["p0"].log_threshold


def test_decide_against_the_baseline_never_drops_the_baseline_nor_a_policy_better_than_it():
    outcomes = sweep(np.random.default_rng(7), [0.3, 0.9, 0.05])
    verdicts = decide(outcomes, list(outcomes), alpha=0.05, drop="worse-than-baseline", margin=0.0, baseline="p1")
    assert set(verdicts) == {"p0", "p2"} and verdicts["p0"].drop and verdicts["p2"].drop
    assert verdicts["p0"].strongest == "p1"
    verdicts = decide(outcomes, list(outcomes), alpha=0.05, drop="worse-than-baseline", margin=0.0, baseline="p0")
    assert not verdicts["p1"].drop and verdicts["p2"].drop


def test_decide_counts_policies_dropped_earlier_and_never_empties_the_race():
    rng = np.random.default_rng(8)
    outcomes = sweep(rng, [0.9, 0.1, 0.1])
    outcomes["p0"] = outcomes["p0"][:10]  # the strong one left earlier (it cannot in practice; the guard must hold)
    verdicts = decide(outcomes, ["p1", "p2"], alpha=0.05, drop="worse-than-best", margin=0.0, baseline="p0")
    assert set(verdicts) == {"p1", "p2"}
    assert sum(not verdict.drop for verdict in verdicts.values()) >= 1


def test_decide_refuses_outcomes_over_different_tasks():
    with pytest.raises(ValueError, match="same tasks"):
        decide(
            {"a": np.zeros((3, 2)), "b": np.zeros((3, 4))},
            ["a", "b"],
            alpha=0.05,
            drop="worse-than-best",
            margin=0.0,
            baseline="a",
        )


def test_the_confidence_sequence_covers_the_true_difference_at_every_look():
    """Coverage checked at every 10th cycle of each simulated sequence, not only at the end."""
    rng = np.random.default_rng(9)
    alpha, misses, sequences = 0.1, 0, 200
    for _ in range(sequences):
        x = (rng.uniform(size=(40, 4)) < 0.7).astype(float)
        y = (rng.uniform(size=(40, 4)) < 0.5).astype(float)
        looks = [confidence_sequence(x[:c] - y[:c], alpha, grid=101) for c in range(10, 41, 10)]
        misses += any(not low <= 0.2 <= high for low, high in looks)
    assert misses / sequences <= alpha
    low, high = confidence_sequence(x - y, alpha)
    wide_low, wide_high = confidence_sequence(x[:5] - y[:5], alpha)
    assert wide_low <= low < high <= wide_high and high - low < wide_high - wide_low
    assert confidence_sequence(np.zeros((0, 4)), alpha) == (-1.0, 1.0)
