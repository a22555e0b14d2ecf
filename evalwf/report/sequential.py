"""Anytime-valid comparison of the policies of a sweep on paired episodes: testing by betting, one bet per cycle.

Every policy of a sweep meets the same episodes (shared sealed manifests), so the paired difference of episode k of
task t between policies j and i, D = X_j - X_i in {-1, 0, 1}, is an unbiased sample of how much better j is there.
A *cycle* is one episode index across every task of the benchmark. Betting against H0: delta_ji <= m (the task mean
of the per-task differences at most the margin m), the capital after cycle c is

    K_ji(c) = prod_{c' <= c} prod_t (1 + lambda_c' (D_c't - m)),   lambda_c' in [0, cap] chosen from cycles < c'.

Under H0 it is a non-negative supermartingale (docs/adaptive.md: the tasks of a cycle are independent, and by the
inequality of arithmetic and geometric means one bet shared by the tasks wins in expectation no more than a bet on
their mean), so by Ville's inequality P(sup_c K_ji(c) >= 1/a) <= a: it may be read after every round, and a policy
that left the race keeps its last value. `decide_drops` turns these into drops, corrected for the number of policies;
`confidence_sequence` inverts the hedged two-sided bet into an anytime-valid interval for delta_ji (Waudby-Smith and
Ramdas, JRSS B 2024); `surely_continuing` names the policies that no outcome of the coming round can drop, whose
next round may start before the decision. Arrays may carry leading dimensions (many simulated sweeps at once:
scripts/bench_adaptive.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The largest fraction of its capital a bet may risk on one episode: a loss leaves at least 1 - LAMBDA_CAP, so the
# capital never reaches zero and one bad episode never ends the test.
LAMBDA_CAP = 0.5
# Pseudo-episodes of the running mean (at the margin) and variance (at 1/4) before any data: the first bets are small.
PRIOR_WEIGHT = 1.0
DROP_RULES = ("worse-than-best", "worse-than-baseline")


def bet_sizes(differences: np.ndarray, margin: float | np.ndarray, sign: float = 1.0) -> np.ndarray:
    """The predictable aGRAPA bet of every cycle on sign * (D - margin) > 0: (..., cycles, tasks) -> (..., cycles).

    aGRAPA (Waudby-Smith and Ramdas, section 5) bets edge / (variance + edge^2), from the running mean and variance
    of D over the cycles BEFORE each cycle with PRIOR_WEIGHT pseudo-episodes at mean `margin`, variance 1/4. That
    is exactly sign * A / (B + PRIOR_WEIGHT / 4) with A = sum (D - margin) and B = sum (D - margin)^2 over the
    earlier episodes (docs/adaptive.md derives it), the form computed here: a bet depends on the earlier episodes
    only through A and B, which is what bounds the next round's outcomes (`surely_continuing`). Clipped to
    [0, cap]; cap keeps every factor at or above 1 - LAMBDA_CAP."""
    margin = np.asarray(margin, dtype=float)
    excess = differences - margin[..., None, None]
    # sums over the cycles before each one (a zero first, not cumsum minus itself: the rounding of a later cycle
    # must not reach an earlier bet)
    sums = np.stack([excess.sum(axis=-1), (excess * excess).sum(axis=-1)])
    before, squares_before = np.cumsum(np.concatenate([np.zeros_like(sums[..., :1]), sums[..., :-1]], -1), -1)
    cap = LAMBDA_CAP / np.maximum(1.0 + sign * margin, LAMBDA_CAP)
    return np.clip(sign * before / (squares_before + PRIOR_WEIGHT / 4.0), 0.0, cap[..., None])


def log_capital(differences: np.ndarray, margin: float | np.ndarray, sign: float = 1.0) -> np.ndarray:
    """log K after each cycle of betting that sign * (D - margin) > 0: (..., cycles, tasks) -> (..., cycles).

    Only complete cycles: every task has its episode of each cycle (a cycle missing a task would test the mean of
    the tasks it has, not the benchmark's)."""
    differences = np.asarray(differences, dtype=float)
    if differences.ndim < 2:
        raise ValueError(f"paired differences must be (cycles, tasks), got shape {differences.shape}")
    if np.isnan(differences).any():
        raise ValueError("paired differences hold NaN: compare only cycles that every task of both policies has")
    if differences.size and np.abs(differences).max() > 1.0:
        raise ValueError("paired differences of success must lie in [-1, 1]")
    bets = bet_sizes(differences, margin, sign)
    margin = np.asarray(margin, dtype=float)[..., None, None]
    factors = 1.0 + bets[..., None] * sign * (differences - margin)
    return np.cumsum(np.log(factors).sum(axis=-1), axis=-1)


def pairwise_log_capital(outcomes: np.ndarray, margin: float) -> np.ndarray:
    """log K_ji(c) for every ordered pair: outcomes (..., policies, cycles, tasks) of 0/1 success ->
    (..., better j, worse i, cycles). The diagonal (a policy against itself) is 0.

    Cycles a policy was not evaluated in may hold anything (0): a value is only read at a cycle both policies of
    the pair reached, and the bets up to it depend on earlier cycles only."""
    outcomes = np.asarray(outcomes, dtype=float)
    differences = outcomes[..., :, None, :, :] - outcomes[..., None, :, :, :]
    return log_capital(differences, margin)


def stopped_log_e_values(pairwise: np.ndarray, cycles_evaluated: np.ndarray) -> np.ndarray:
    """log K_ji at the last cycle both j and i were evaluated in: (..., M, M, cycles), (..., M) -> (..., M, M).

    A dropped policy stops at its last round, and so does every comparison with it (a stopped supermartingale is
    one still); no shared cycle at all: log K = 0."""
    cycles_evaluated = np.asarray(cycles_evaluated)
    shared = np.minimum(cycles_evaluated[..., :, None], cycles_evaluated[..., None, :])
    index = np.clip(shared - 1, 0, pairwise.shape[-1] - 1)
    values = np.take_along_axis(pairwise, index[..., None], axis=-1)[..., 0]
    return np.where(shared > 0, values, 0.0)


def null_log_e_values(stopped: np.ndarray, drop: str, baseline: int) -> np.ndarray:
    """log of the e-value of each policy i's null, from the stopped pairwise values (..., M, M) -> (..., M).

    worse-than-baseline: H0_i = "the baseline is not better than i by more than the margin": K_{baseline, i}.
    worse-than-best: H0_i = "no policy is better than i by more than the margin": the mean over j != i of K_ji, an
    e-process under H0_i because each K_ji is one (an average of test supermartingales is one). It is the capital
    of splitting the stake evenly over the challengers at the start, so it follows the strongest of them."""
    policies = stopped.shape[-1]
    if drop == "worse-than-baseline":
        values = stopped[..., baseline, :].copy()
        values[..., baseline] = 0.0  # the baseline is never tested against itself
        return values
    if drop == "worse-than-best":
        others = ~np.eye(policies, dtype=bool)
        masked = np.where(others, stopped, -np.inf)
        return np.logaddexp.reduce(masked, axis=-2) - math.log(policies - 1)
    raise ValueError(f"adaptive.drop {drop!r}: use one of {', '.join(DROP_RULES)}")


def log_threshold(drop: str, policies: int, alpha: float) -> float:
    """The level a null's e-value must reach to drop its policy, Bonferroni-corrected over the nulls tested: the
    M - 1 policies other than the baseline (worse-than-baseline) or all M (worse-than-best). Then by Ville's
    inequality and the union bound, P(any policy is ever dropped although its null holds) <= alpha."""
    if drop not in DROP_RULES:
        raise ValueError(f"adaptive.drop {drop!r}: use one of {', '.join(DROP_RULES)}")
    tested = policies - 1 if drop == "worse-than-baseline" else policies
    return math.log(tested / alpha)


def decide_drops(log_e: np.ndarray, racing: np.ndarray, threshold: float, drop: str, baseline: int) -> np.ndarray:
    """Which racing policies to drop now: (..., M) log e-values and racing mask -> (..., M) drop mask.

    The baseline is never dropped (the others are measured against it), and a race never loses all its policies:
    should every racing one reach the threshold, the one with the least evidence against it stays."""
    drops = racing & (log_e >= threshold)
    if drop == "worse-than-baseline":
        drops[..., baseline] = False
    everyone = drops.sum(axis=-1) == racing.sum(axis=-1)
    if everyone.any():
        least = np.argmin(np.where(racing, log_e, np.inf), axis=-1)
        keep = np.zeros_like(drops)
        np.put_along_axis(keep, least[..., None], True, axis=-1)
        drops = np.where(everyone[..., None], drops & ~keep, drops)
    return drops


def confidence_sequence(differences: np.ndarray, alpha: float, grid: int = 401) -> tuple[float, float]:
    """An anytime-valid (1 - alpha) interval for the task-mean paired difference, after the last cycle.

    The set of m where the hedged bet (half the capital on delta > m, half on delta < m; each a test
    supermartingale at the true delta) is still below 1/alpha, on a grid of m in [-1, 1]; its hull, widened by
    one grid step so that a true delta between grid points is never left out."""
    differences = np.asarray(differences, dtype=float)
    if differences.shape[0] == 0:
        return (-1.0, 1.0)
    margins = np.linspace(-1.0, 1.0, grid)
    up = log_capital(differences[None], margins, 1.0)[:, -1]
    down = log_capital(differences[None], margins, -1.0)[:, -1]
    hedged = np.logaddexp(up, down) - math.log(2.0)
    inside = margins[hedged < math.log(1.0 / alpha)]
    step = margins[1] - margins[0]
    if inside.size == 0:  # narrower than the grid: the observed mean, widened
        centre = float(differences.mean())
        return (max(-1.0, centre - step), min(1.0, centre + step))
    return (max(-1.0, float(inside.min()) - step), min(1.0, float(inside.max()) + step))


@dataclass(frozen=True)
class Verdict:
    """What one round's decision says of a policy still in the race."""

    policy: str
    drop: bool
    log_e_value: float  # of its null (worse-than-best: the mean over challengers; worse-than-baseline: vs baseline)
    log_threshold: float
    strongest: str  # the challenger whose bet against it gained most (the baseline, for worse-than-baseline)

    @property
    def e_value(self) -> float:
        return math.exp(min(self.log_e_value, 700.0))


def _stopped(outcomes: dict[str, np.ndarray], margin: float) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The policies' names, cycles evaluated, outcomes padded to (M, cycles, tasks) and stopped log K_ji (M, M)."""
    names = list(outcomes)
    tasks = {array.shape[1] for array in outcomes.values() if np.ndim(array) == 2}
    if len(tasks) != 1 or any(np.ndim(array) != 2 for array in outcomes.values()):
        raise ValueError("every policy's outcomes must be (cycles, tasks) over the same tasks")
    evaluated = np.array([outcomes[name].shape[0] for name in names])
    padded = np.zeros((len(names), int(evaluated.max()), tasks.pop()))
    for index, name in enumerate(names):
        padded[index, : evaluated[index]] = outcomes[name]
    if not evaluated.any():  # nothing evaluated yet: every capital is still 1
        return names, evaluated, padded, np.zeros((len(names), len(names)))
    return names, evaluated, padded, stopped_log_e_values(pairwise_log_capital(padded, margin), evaluated)


def decide(
    outcomes: dict[str, np.ndarray],
    racing: list[str],
    *,
    alpha: float,
    drop: str,
    margin: float,
    baseline: str,
) -> dict[str, Verdict]:
    """One round's decision for the policies still `racing`, from every policy's outcomes so far.

    `outcomes[name]`: (cycles evaluated, tasks) 0/1 success of every policy of the sweep, those dropped earlier
    included (for the cycles they reached): M counts all of them, so the correction is the one fixed when the
    sweep began."""
    if len(outcomes) < 2:
        return {}
    names, _, _, stopped = _stopped(outcomes, margin)
    base = names.index(baseline)
    log_e = null_log_e_values(stopped, drop, base)
    threshold = log_threshold(drop, len(names), alpha)
    racing_mask = np.array([name in racing for name in names])
    drops = decide_drops(log_e, racing_mask, threshold, drop, base)
    verdicts = {}
    for index, name in enumerate(names):
        if not racing_mask[index] or (drop == "worse-than-baseline" and index == base):
            continue
        column = np.where(np.arange(len(names)) == index, -np.inf, stopped[:, index])
        strongest = baseline if drop == "worse-than-baseline" else names[int(column.argmax())]
        verdicts[name] = Verdict(name, bool(drops[index]), float(log_e[index]), threshold, strongest)
    return verdicts


# How far below the threshold a certified policy's largest possible e-value must stay: the decision recomputes the
# same sums in floating point, so a bound equal to the threshold up to rounding is no proof.
CERTIFY_SLACK = 1e-9


def largest_null_log_e_values(
    outcomes: dict[str, np.ndarray], racing: list[str], coming_cycles: int, *, drop: str, margin: float, baseline: str
) -> np.ndarray:
    """The largest log e-value each policy's null can reach after `coming_cycles` more cycles of the `racing`
    policies, over every outcome those cycles can have: (M,) in the order of `outcomes`.

    Exact, not a heuristic (docs/adaptive.md proves it): a pair's capital K_ji is largest when j succeeds and i
    fails on every coming episode (each such outcome raises its own factor and every later bet, and with every
    later episode a success a larger bet only gains), and that one outcome, every challenger succeeding where
    policy i fails, is the largest for all pairs (j, i) at once, so also for their mean (worse-than-best). A pair
    with a policy not racing is stopped and keeps its value."""
    names, evaluated, padded, stopped = _stopped(outcomes, margin)
    moving = [names.index(name) for name in racing]
    if len({int(evaluated[index]) for index in moving}) > 1:
        raise ValueError("every racing policy must have been evaluated in the same cycles (every round so far)")
    if coming_cycles > 0 and len(moving) > 1:
        shared = padded[moving, : int(evaluated[moving].max())]
        differences = shared[:, None] - shared[None, :]
        best = np.ones((*differences.shape[:2], coming_cycles, differences.shape[-1]))
        extended = np.concatenate([differences, best], axis=-2)
        largest = log_capital(extended, margin)[..., -1]
        rows, columns = np.meshgrid(moving, moving, indexing="ij")
        stopped = stopped.copy()
        stopped[rows, columns] = np.where(np.eye(len(moving), dtype=bool), 0.0, largest)
    return null_log_e_values(stopped, drop, names.index(baseline))


def surely_continuing(
    outcomes: dict[str, np.ndarray],
    racing: list[str],
    coming_cycles: int,
    *,
    alpha: float,
    drop: str,
    margin: float,
    baseline: str,
) -> list[str]:
    """The `racing` policies that the decision after `coming_cycles` more cycles cannot drop, whatever those
    cycles' outcomes: their null's largest e-value (`largest_null_log_e_values`) stays below the threshold, or
    (worse-than-baseline) they are the baseline. Their next round may run before that decision is taken: it
    would be planned for them anyway. The guard that keeps the last policy of a race only removes drops, so it
    is left out (this may certify fewer policies, never a wrong one)."""
    if len(outcomes) < 2:
        return list(racing)
    names = list(outcomes)
    largest = largest_null_log_e_values(outcomes, racing, coming_cycles, drop=drop, margin=margin, baseline=baseline)
    threshold = log_threshold(drop, len(names), alpha)
    return [
        name
        for name in racing
        if (drop == "worse-than-baseline" and name == baseline)
        or largest[names.index(name)] < threshold - CERTIFY_SLACK
    ]
