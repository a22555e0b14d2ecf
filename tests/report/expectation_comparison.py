"""evalwf.report.sequential against the `expectation` library (PyPI 0.6.1), on simulated paired differences: run in
the side environment that has it (scripts/setup_expectation_env.sh, Python 3.12) by test_sequential_vs_expectation.py,
printing one JSON object of what it found.

What `expectation` covers, and how it is compared (docs/adaptive.md, "Why not a library"):
- compounding sequential e-values with a predictable bet, M_t = prod ((1 - mu_s) + mu_s E_s) (its EProcessUpdater):
  for one task, this module's capital at margin m is that process with E_s = 1 + sign (D_s - m) / s and
  mu_s = lambda_s s, s = max(1 + sign m, 1/2) (so E_s >= 0 and mu_s <= 1/2). The bet is chosen by an `expectation`
  combiner written here from the paper's mean-and-variance form of aGRAPA (Waudby-Smith and Ramdas, section 5),
  from the past e-values only; the capital, the rejection times at 1/alpha and the hedged confidence sequence
  inverted from the library's processes must equal this module's.
- merging e-values by their arithmetic mean (arithmetic_mean_merge): the worse-than-best null's e-value.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
from expectation.modules.eprocessupdater import EProcessUpdater
from expectation.modules.hypothesistesting import EProcess, EProcessConfig
from expectation.modules.martingales import SequentialEValueCombiner
from expectation.modules.merging import arithmetic_mean_merge

from evalwf.report import sequential

PRIOR_WEIGHT = 1.0  # one pseudo-observation at the margin with variance 1/4 (docs/adaptive.md)
PRIOR_VARIANCE = 0.25


class PaperAGrapa(SequentialEValueCombiner):
    """aGRAPA in the library's terms: mu = scale * clip(edge / (variance + edge^2), 0, cap / scale), the edge and
    variance of y = sign (D - m) = scale (E - 1) over the past e-values and the pseudo-observation (y = 0,
    variance 1/4); cap / scale = 1/2 / scale is the module's clip (docs/adaptive.md)."""

    def __init__(self, scale: float):
        self.scale = scale

    def compute_lambda(self, past_e_values: list[float], t: int) -> float:
        y = (np.asarray(past_e_values, dtype=float) - 1.0) * self.scale
        weight = PRIOR_WEIGHT + len(y)
        mean = y.sum() / weight  # the pseudo-observation sits at 0
        variance = (PRIOR_WEIGHT * (PRIOR_VARIANCE + mean**2) + ((y - mean) ** 2).sum()) / weight
        return self.scale * float(np.clip(mean / (variance + mean**2), 0.0, sequential.LAMBDA_CAP / self.scale))


def library_log_capital(differences: np.ndarray, margin: float, sign: float) -> np.ndarray:
    """log M_t of the library's e-process over one stream of paired differences, betting sign (D - m) > 0."""
    scale = max(1.0 + sign * margin, sequential.LAMBDA_CAP)
    updater = EProcessUpdater(EProcessConfig(betting_strategy="conservative"))
    updater.combiner = PaperAGrapa(scale)
    process = EProcess(config=updater.config)
    for d in differences:
        updater.update(process, 1.0 + sign * (d - margin) / scale)
    return np.array(process.log_process_values[1:])


def simulated(rng: np.random.Generator, cycles: int, p_j: float, p_i: float, shared: float) -> np.ndarray:
    """Paired differences X_j - X_i of two policies on the same episodes: with probability `shared` an episode
    decides both (one draw at the mean rate), else each succeeds on its own."""
    common = rng.random(cycles) < shared
    draw = rng.random(cycles) < (p_j + p_i) / 2
    x_j = np.where(common, draw, rng.random(cycles) < p_j)
    x_i = np.where(common, draw, rng.random(cycles) < p_i)
    return x_j.astype(float) - x_i.astype(float)


def library_interval(differences: np.ndarray, alpha: float, grid: int) -> tuple[float, float]:
    """The hedged confidence sequence from the library's processes, inverted on the grid as the module does."""
    margins = np.linspace(-1.0, 1.0, grid)
    hedged = np.array(
        [
            np.logaddexp(library_log_capital(differences, m, 1.0)[-1], library_log_capital(differences, m, -1.0)[-1])
            - math.log(2.0)
            for m in margins
        ]
    )
    inside = margins[hedged < math.log(1.0 / alpha)]
    step = margins[1] - margins[0]
    return (max(-1.0, float(inside.min()) - step), min(1.0, float(inside.max()) + step))


def first_crossing(log_capital: np.ndarray, alpha: float) -> int | None:
    crossed = np.flatnonzero(log_capital >= math.log(1.0 / alpha))
    return int(crossed[0]) if crossed.size else None


def main() -> dict[str, object]:
    rng = np.random.default_rng(20261205)
    alpha, cycles, grid = 0.05, 60, 41
    scenarios = [(0.8, 0.4, 0.5, 0.0), (0.6, 0.6, 0.3, 0.1), (0.3, 0.7, 0.0, -0.2), (0.9, 0.5, 0.8, 0.25)]
    capital_gap, bets_compared, crossings, crossing_mismatches, sequences = 0.0, 0, 0, 0, 0
    interval_gap, intervals = 0.0, 0
    for p_j, p_i, shared, margin in scenarios:
        for _ in range(3):
            differences = simulated(rng, cycles, p_j, p_i, shared)
            sequences += 1
            for sign in (1.0, -1.0):
                ours = sequential.log_capital(differences[:, None], margin, sign)
                theirs = library_log_capital(differences, margin, sign)
                capital_gap = max(capital_gap, float(np.abs(ours - theirs).max()))
                bets_compared += cycles
                ours_crossing, their_crossing = first_crossing(ours, alpha), first_crossing(theirs, alpha)
                crossings += ours_crossing is not None
                crossing_mismatches += ours_crossing != their_crossing
            if sequences % 3 == 1:  # intervals cost grid x 2 processes: a third of the sequences
                ours_interval = sequential.confidence_sequence(differences[:, None], alpha, grid)
                their_interval = library_interval(differences, alpha, grid)
                interval_gap = max(
                    interval_gap, *(abs(a - b) for a, b in zip(ours_interval, their_interval, strict=True))
                )
                intervals += 1
    # the worse-than-best null: the mean over challengers of K_ji, and the library's arithmetic-mean merge
    outcomes = (rng.random((4, 30, 5)) < np.array([0.9, 0.6, 0.5, 0.3])[:, None, None]).astype(float)
    stopped = sequential.stopped_log_e_values(sequential.pairwise_log_capital(outcomes, 0.05), np.array([30] * 4))
    ours_null = sequential.null_log_e_values(stopped, "worse-than-best", 0)
    merged = [math.log(arithmetic_mean_merge(np.exp(np.delete(stopped[:, i], i)))) for i in range(len(ours_null))]
    return {
        "sequences": sequences,
        "bets_compared": bets_compared,
        "max_log_capital_gap": capital_gap,
        "crossings": crossings,
        "crossing_mismatches": crossing_mismatches,
        "intervals": intervals,
        "max_interval_gap": interval_gap,
        "max_merge_gap": float(np.abs(np.array(merged) - ours_null).max()),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
    sys.exit(0)
