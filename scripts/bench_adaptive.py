"""Benchmark: adaptive sweeps on simulated Bernoulli episodes (no simulator), with the decision rule the workflow's
decision job runs (evalwf.report.sequential).

    python scripts/bench_adaptive.py [--sweeps 2000] [--tasks 10] [--episodes 50] [--round-episodes 5]
                                     [--min-episodes 10] [--alpha 0.05] [--coupling 0.5] [--seed 0]

Each simulated sweep draws per-task success rates (a policy's rate plus a task offset, uniform in +-spread, shared
by the policies) and per-episode outcomes; a policy's episodes share a latent difficulty with the other policies'
with probability `coupling` (checkpoints of one run fail on the same hard scenes), else draw their own. Rounds of
`round_episodes` episodes per task run for every policy still racing; after each round (from `min_episodes` on)
the decision drops what its e-values allow. Printed per scenario: the share of episodes saved against evaluating
everything, and the share of sweeps with a WRONG drop (a policy dropped although its null holds: worse-than-best,
within the margin of the truly best; worse-than-baseline, within the margin of the baseline or better than it),
with a 95 % Wilson upper bound. The flat scenarios are the type-I checks: every drop there is wrong; the last two
put a policy within the margin below a baseline that is not the best, or exactly at the margin (one, or all nine:
there every drop is wrong again, at the null's boundary).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from evalwf.report.sequential import (
    decide_drops,
    log_threshold,
    null_log_e_values,
    pairwise_log_capital,
    stopped_log_e_values,
)
from evalwf.report.stats import wilson_interval

CURVE = np.linspace(0.40, 0.90, 10)  # ten checkpoints of a training run
FLAT = np.full(10, 0.60)
# a baseline that is not the best (70 %), with one policy within the 5 pp margin below it (67 %: its null holds, so
# dropping it is wrong) or exactly at the margin (65 %: the null's boundary, where wrong drops are likeliest)
WITHIN_MARGIN = np.array([0.70, 0.40, 0.45, 0.50, 0.55, 0.60, 0.67, 0.80, 0.85, 0.90])
AT_MARGIN = np.array([0.70, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.80, 0.85, 0.90])
ALL_AT_MARGIN = np.array([0.70, *[0.65] * 9])  # every drop wrong: the type-I check at the null's boundary
# the null's boundary in floating point: a task mean exactly at the margin below its reference holds the null
NULL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Scenario:
    label: str
    rates: np.ndarray  # per policy; policy 0 is the baseline
    drop: str
    margin: float = 0.0


SCENARIOS = (
    Scenario("curve 40->90 %", CURVE, "worse-than-best"),
    Scenario("curve 40->90 %, margin 5 pp", CURVE, "worse-than-best", 0.05),
    Scenario("flat 60 %", FLAT, "worse-than-best"),
    Scenario("curve, baseline = 90 %", CURVE[::-1].copy(), "worse-than-baseline"),
    Scenario("flat 60 %", FLAT, "worse-than-baseline"),
    Scenario("baseline 70 %, one at 67 %, margin 5 pp", WITHIN_MARGIN, "worse-than-baseline", 0.05),
    Scenario("baseline 70 %, one at 65 %, margin 5 pp", AT_MARGIN, "worse-than-baseline", 0.05),
    Scenario("baseline 70 %, all others at 65 %, margin 5 pp", ALL_AT_MARGIN, "worse-than-baseline", 0.05),
)


@dataclass
class Tally:
    sweeps: int = 0
    wrong: int = 0
    evaluated: int = 0
    total: int = 0
    dropped: int = 0


def draw_outcomes(
    rates: np.ndarray, args: argparse.Namespace, sweeps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-task success rates (sweeps, policies, tasks) around the policies' `rates`, and 0/1 outcomes
    (sweeps, policies, episodes, tasks) whose latent difficulty the policies share with probability `coupling`."""
    policies, tasks, episodes = len(rates), args.tasks, args.episodes
    offsets = rng.uniform(-args.spread, args.spread, size=(sweeps, 1, tasks))
    task_rates = np.clip(rates[None, :, None] + offsets, 0.02, 0.98)
    shared = rng.uniform(size=(sweeps, 1, episodes, tasks))
    own = rng.uniform(size=(sweeps, policies, episodes, tasks))
    latent = np.where(rng.uniform(size=own.shape) < args.coupling, shared, own)
    return task_rates, (latent < task_rates[:, :, None, :]).astype(float)


def simulate_chunk(scenario: Scenario, args: argparse.Namespace, sweeps: int, rng: np.random.Generator) -> Tally:
    """`sweeps` sweeps of the scenario at once, round by round, as the decision job decides them."""
    policies, tasks, episodes = len(scenario.rates), args.tasks, args.episodes
    rates, outcomes = draw_outcomes(scenario.rates, args, sweeps, rng)
    pairwise = pairwise_log_capital(outcomes, scenario.margin)
    threshold = log_threshold(scenario.drop, policies, args.alpha)
    racing = np.ones((sweeps, policies), dtype=bool)
    evaluated = np.zeros((sweeps, policies), dtype=int)
    round_ends = [*range(args.round_episodes, episodes, args.round_episodes), episodes]
    for end in round_ends:
        evaluated = np.where(racing, end, evaluated)
        if end < args.min_episodes or end == episodes:
            continue
        log_e = null_log_e_values(stopped_log_e_values(pairwise, evaluated), scenario.drop, 0)
        racing &= ~decide_drops(log_e, racing, threshold, scenario.drop, 0)
    task_mean = rates.mean(axis=-1)
    reference = task_mean.max(axis=-1) if scenario.drop == "worse-than-best" else task_mean[:, 0]
    null_holds = task_mean >= reference[:, None] - scenario.margin - NULL_TOLERANCE
    dropped = ~racing
    return Tally(
        sweeps,
        int((dropped & null_holds).any(axis=-1).sum()),
        int(evaluated.sum()) * tasks,
        sweeps * policies * episodes * tasks,
        int(dropped.sum()),
    )


def run(scenario: Scenario, args: argparse.Namespace) -> tuple[Tally, float]:
    rng = np.random.default_rng(args.seed)
    tally = Tally()
    started = time.perf_counter()
    for first in range(0, args.sweeps, args.chunk):
        part = simulate_chunk(scenario, args, min(args.chunk, args.sweeps - first), rng)
        for key in vars(tally):
            setattr(tally, key, getattr(tally, key) + getattr(part, key))
    return tally, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=50, help="per policy and task, evaluating everything")
    parser.add_argument("--round-episodes", type=int, default=5)
    parser.add_argument("--min-episodes", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--coupling", type=float, default=0.5)
    parser.add_argument("--spread", type=float, default=0.1, help="task offsets uniform in +-spread")
    parser.add_argument("--chunk", type=int, default=20, help="sweeps simulated at once (memory)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"{args.sweeps} simulated sweeps per row: 10 policies x {args.tasks} tasks x {args.episodes} episodes, "
        f"rounds of {args.round_episodes}, decisions from {args.min_episodes} on, alpha {args.alpha}, "
        f"coupling {args.coupling}, task spread +-{args.spread}"
    )
    header = ("scenario", "drop", "saved", "policies dropped", "sweeps w/ wrong drop", "95 % upper", "seconds")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for scenario in SCENARIOS:
        tally, seconds = run(scenario, args)
        upper = wilson_interval(tally.wrong, tally.sweeps)[1]
        print(
            f"| {scenario.label} | {scenario.drop} | {100 * (1 - tally.evaluated / tally.total):.1f} % "
            f"| {tally.dropped / tally.sweeps:.2f} of 10 | {100 * tally.wrong / tally.sweeps:.2f} % "
            f"| {100 * upper:.2f} % | {seconds:.1f} |"
        )


if __name__ == "__main__":
    main()
