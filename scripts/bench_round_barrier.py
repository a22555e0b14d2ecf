"""Benchmark: what the round barrier of an adaptive sweep costs, and how much of it early starts win back
(a discrete-event simulation of W workers; no simulator, no queue).

    python scripts/bench_round_barrier.py [--sweeps 100] [--workers 4 8 16 32] [--batch-size 5]
                                          [--decision-s 5] [--seed 0]   (and scripts/bench_adaptive.py's options)
                                          [--speculate-rounds K ...] [--only-speculative]

Each simulated sweep draws Bernoulli outcomes as scripts/bench_adaptive.py does (10 policies x 10 tasks x 50
episodes, rounds of 5, decisions from 10 on) and takes every decision with the very functions the decision job
calls (evalwf.report.sequential.decide, and surely_continuing for the early starts), so which batches run is the
same with and without early starts; only when they may start differs:

- barrier: round r + 1 of a policy becomes ready when decision r is taken (what the workflow did before).
- early: also round r + 2 of the policies decision r certifies (round 1 of those the config certifies, at 0).
- no barrier: every batch the sweep ends up running is ready at 0 (a bound no adaptive plan can beat).
- speculative, look-ahead K (`--speculate-rounds`, a table of its own): with decision d the last written, the
  rounds up to d + 1 + K of every policy it lets continue are ready, earlier rounds claimed first. A decision still
  waits only for its own round's batches; when it drops a policy, the policy's queued batches of later rounds are
  cancelled and its running ones stop at once. Their time counts as busy but not as kept work, and every one that
  started counts as spent in full (all its episodes) in the savings. The decisions are the same as in every other
  mode (they read their own rounds only), so the wrong drops are too.

A batch's duration follows LIBERO's measured timings on CPU (shared/reference/libero.md): env creation 5-9 s,
per episode a reset of 3-7 s and steps of the task's suite (spatial 220 steps at 0.29 s, object 280 at 0.18 s,
goal 300 at 0.33 s, libero_10 520 at 0.27 s; the tasks cycle through the suites), +-10 % per step; a failed episode
runs to the step limit, a success ends at a uniform 30-90 % of it. So failures cost more, as they do. Each batch
also pays a 2 s dispatch gap, and a decision takes `--decision-s` after its round's last batch (Snakemake noticing
it, the local decision job, the next submissions). Free workers take the ready batch of the longest expected task
first (the Labtasker executor's longest-first priority), FIFO among equals; `early, rounds first` takes earlier
rounds first instead (what a round-ordered priority would give). Utilisation = summed batch time / (W x span).
"""

from __future__ import annotations

import argparse
import heapq
import time
from dataclasses import dataclass

import numpy as np
from bench_adaptive import CURVE, FLAT, NULL_TOLERANCE, Scenario, draw_outcomes

from evalwf.report.sequential import decide, surely_continuing

SUITES = ((220, 0.29), (280, 0.18), (300, 0.33), (520, 0.27))  # LIBERO step limits and measured s/step on CPU
DISPATCH_S = 2.0

SCENARIOS = (
    Scenario("curve 40->90 %", CURVE, "worse-than-best"),
    Scenario("curve, baseline = 90 %", CURVE[::-1].copy(), "worse-than-baseline"),
    Scenario("flat 60 %", FLAT, "worse-than-best"),
)
MODES = ("barrier", "early", "early, rounds first", "no barrier")


@dataclass(frozen=True)
class Batch:
    policy: int
    round: int
    task: int
    duration: float
    expected: float  # what the longest-first priority sees: the task's expected batch time


@dataclass
class RacePlan:
    """What the decisions of one simulated sweep say, round by round (independent of timing)."""

    racing: list[list[int]]  # the policies racing in each round
    surely: list[list[int]]  # decision r (index r + 1; index 0: the config): whose round r + 2 may start now


def race_plan(outcomes: np.ndarray, scenario: Scenario, args: argparse.Namespace) -> RacePlan:
    """Round by round as the decision job decides: the policies racing and the early starts decision r allows."""
    policies = outcomes.shape[0]
    names = [f"p{index}" for index in range(policies)]
    settings = {"alpha": args.alpha, "drop": scenario.drop, "margin": scenario.margin, "baseline": names[0]}
    rounds = args.episodes // args.round_episodes
    racing, evaluated = list(range(policies)), [0] * policies
    plan = RacePlan([], [])

    def certified(round_index: int, racing_now: list[int]) -> list[int]:
        """Of those racing in `round_index`, whom its decision cannot drop (there is none after the last round)."""
        end = (round_index + 1) * args.round_episodes
        if round_index >= rounds - 1:
            return []
        if end < args.min_episodes:
            return racing_now
        so_far = {names[p]: outcomes[p, : evaluated[p]] for p in range(policies)}
        sure = surely_continuing(so_far, [names[p] for p in racing_now], args.round_episodes, **settings)
        return [names.index(name) for name in sure]

    plan.surely.append(certified(0, racing))
    for round_index in range(rounds):
        plan.racing.append(list(racing))
        end = (round_index + 1) * args.round_episodes
        for p in racing:
            evaluated[p] = end
        if round_index == rounds - 1:
            break
        if end >= args.min_episodes:
            so_far = {names[p]: outcomes[p, : evaluated[p]] for p in range(policies)}
            verdicts = decide(so_far, [names[p] for p in racing], **settings)
            racing = [p for p in racing if not (names[p] in verdicts and verdicts[names[p]].drop)]
        plan.surely.append(certified(round_index + 1, racing))
    return plan


def _round_batches(
    outcomes: np.ndarray, policy: int, round_index: int, args: argparse.Namespace, rng: np.random.Generator
) -> list[Batch]:
    """One policy's batches of one round, with durations from LIBERO's timings and the episodes' outcomes."""
    tasks = outcomes.shape[-1]
    limits = np.array([SUITES[t % len(SUITES)][0] for t in range(tasks)], dtype=float)
    per_step = np.array([SUITES[t % len(SUITES)][1] for t in range(tasks)])
    expected_episode = 5.0 + limits * per_step  # the cost model's view: every episode runs to its limit
    items = []
    for start in range(round_index * args.round_episodes, (round_index + 1) * args.round_episodes, args.batch_size):
        for t in range(tasks):
            episodes = outcomes[policy, start : start + args.batch_size, t]
            fraction = np.where(episodes > 0, rng.uniform(0.3, 0.9, size=episodes.size), 1.0)
            steps = fraction * limits[t] * per_step[t] * rng.uniform(0.9, 1.1, size=episodes.size)
            duration = rng.uniform(5, 9) + float((rng.uniform(3, 7, size=episodes.size) + steps).sum())
            items.append(
                Batch(policy, round_index, t, duration + DISPATCH_S, float(expected_episode[t]) * episodes.size)
            )
    return items


def batch_times(
    outcomes: np.ndarray, plan: RacePlan, args: argparse.Namespace, rng: np.random.Generator
) -> dict[tuple[int, int], list[Batch]]:
    """(policy, round) -> its batches, for the rounds the decisions let each policy run."""
    return {
        (p, round_index): _round_batches(outcomes, p, round_index, args, rng)
        for round_index, racing in enumerate(plan.racing)
        for p in racing
    }


def discardable_times(
    outcomes: np.ndarray, plan: RacePlan, args: argparse.Namespace, rng: np.random.Generator
) -> dict[tuple[int, int], list[Batch]]:
    """(policy, round) -> its batches, for the rounds after a policy was dropped: what a speculative run of them
    would take (never part of a decision). Drawn from their own generator, so the other modes' figures stay."""
    return {
        (p, round_index): _round_batches(outcomes, p, round_index, args, rng)
        for round_index, racing in enumerate(plan.racing)
        for p in range(outcomes.shape[0])
        if p not in racing
    }


def simulate(
    plan: RacePlan, batches: dict[tuple[int, int], list[Batch]], workers: int, mode: str, decision_s: float
) -> tuple[float, float]:
    """(span, summed batch time) of one sweep on `workers` workers under `mode`."""
    released: set[tuple[int, int]] = set()
    ready: list[tuple[tuple, int, Batch]] = []
    order = 0

    def release(policy: int, round_index: int) -> None:
        nonlocal order
        if (policy, round_index) in released or (policy, round_index) not in batches:
            return
        released.add((policy, round_index))
        for batch in batches[(policy, round_index)]:
            key = (batch.round, -batch.expected) if mode == "early, rounds first" else (-batch.expected,)
            heapq.heappush(ready, (key, order, batch))
            order += 1

    if mode == "no barrier":
        for policy, round_index in batches:
            release(policy, round_index)
    else:
        for policy in plan.racing[0]:
            release(policy, 0)
        if mode != "barrier":
            for policy in plan.surely[0]:
                release(policy, 1)
    left = {r: sum(len(batches[(p, r)]) for p in racing) for r, racing in enumerate(plan.racing)}
    events: list[tuple[float, int, str, int]] = []  # (time, order, kind, round)
    free, now, busy, sequence = workers, 0.0, 0.0, 0

    def start_free() -> None:
        nonlocal free, sequence, busy
        while free and ready:
            _, _, batch = heapq.heappop(ready)
            free -= 1
            busy += batch.duration
            sequence += 1
            heapq.heappush(events, (now + batch.duration, sequence, "done", batch.round))

    decided = -1  # the last decision written: decision r reads decision r - 1 as well as round r

    def decide_when_ready(round_index: int) -> None:
        nonlocal sequence
        last = round_index + 1 == len(plan.racing)  # the last round needs no decision
        if mode != "no barrier" and not last and left[round_index] == 0 and decided == round_index - 1:
            sequence += 1
            heapq.heappush(events, (now + decision_s, sequence, "decision", round_index))

    start_free()
    while events:
        now, _, kind, round_index = heapq.heappop(events)
        if kind == "done":
            free += 1
            left[round_index] -= 1
            decide_when_ready(round_index)
        else:  # decision `round_index` is written: the next round of who continues, and early starts
            decided = round_index
            decide_when_ready(round_index + 1)  # its round may have finished first (all of it started early)
            for policy in plan.racing[round_index + 1]:
                release(policy, round_index + 1)
            if mode != "barrier":
                for policy in plan.surely[round_index + 1]:
                    release(policy, round_index + 2)
        start_free()
    return now, busy


@dataclass
class Speculated:
    """One sweep run with speculative rounds."""

    span: float
    useful: float  # summed time of the batches the decisions keep
    discarded: float  # summed time of speculative batches of dropped policies (run in full or stopped at the drop)
    discarded_batches: int  # how many of them started (each counted as spent in full)


def simulate_speculative(
    plan: RacePlan,
    batches: dict[tuple[int, int], list[Batch]],
    discardable: dict[tuple[int, int], list[Batch]],
    workers: int,
    look_ahead: int,
    decision_s: float,
    rounds_first: bool = True,
) -> Speculated:
    """One sweep when, with decision d the last written, every policy it lets continue has its rounds up to
    d + 1 + look_ahead ready (look_ahead 0: the barrier), earlier rounds claimed first (longest first within a
    round), or longest first alone (`rounds_first` False: the Labtasker executor's priority today). Decision d is
    still taken once round d's kept batches are done: it never waits for a speculative one. When it drops a
    policy, that policy's queued batches of later rounds are cancelled and its running ones stop at once; what
    they ran is counted as spent. The scheduler only sees the decisions written, never the plan."""
    rounds = len(plan.racing)
    kept = [set(racing) for racing in plan.racing]
    released: set[tuple[int, int]] = set()
    ready: list[tuple[tuple[int, float], int, Batch]] = []
    running: dict[int, dict[int, tuple[float, Batch]]] = {}  # policy -> sequence -> (end, batch)
    dropped: dict[int, int] = {}  # policy -> the decision that dropped it
    left = {r: sum(len(batches[(p, r)]) for p in racing) for r, racing in enumerate(plan.racing)}
    events: list[tuple[float, int, str, int]] = []  # (time, sequence, kind, round)
    free, now, sequence, order, finished = workers, 0.0, 0, 0, 0.0
    useful, discarded, discarded_batches = 0.0, 0.0, 0
    decided = -1

    def release_up_to(last_round: int, policies: list[int]) -> None:
        nonlocal order
        for policy in policies:
            for round_index in range(min(last_round, rounds - 1) + 1):
                if (policy, round_index) in released:
                    continue
                released.add((policy, round_index))
                source = batches if policy in kept[round_index] else discardable
                for batch in source[(policy, round_index)]:
                    key = (batch.round if rounds_first else 0, -batch.expected)
                    heapq.heappush(ready, (key, order, batch))
                    order += 1

    def start_free() -> None:
        nonlocal free, sequence, useful, discarded, discarded_batches
        while free and ready:
            _, _, batch = heapq.heappop(ready)
            if batch.policy in dropped and batch.round > dropped[batch.policy]:
                continue  # cancelled: its policy was dropped while it waited
            free -= 1
            sequence += 1
            running.setdefault(batch.policy, {})[sequence] = (now + batch.duration, batch)
            heapq.heappush(events, (now + batch.duration, sequence, "done", batch.round))

    def decide_when_ready(round_index: int) -> None:
        nonlocal sequence
        if round_index + 1 < rounds and left[round_index] == 0 and decided == round_index - 1:
            sequence += 1
            heapq.heappush(events, (now + decision_s, sequence, "decision", round_index))

    release_up_to(look_ahead, plan.racing[0])
    start_free()
    stopped: set[int] = set()
    while events:
        now, number, kind, round_index = heapq.heappop(events)
        if kind == "done":
            if number in stopped:
                continue
            free += 1
            for items in running.values():
                if number in items:
                    _, batch = items.pop(number)
                    break
            if batch.policy in kept[batch.round]:
                useful += batch.duration
                finished = now
                left[round_index] -= 1
                decide_when_ready(round_index)
            else:  # finished before the decision that drops its policy: spent, never read
                discarded += batch.duration
                discarded_batches += 1
        else:
            decided = round_index
            for policy in plan.racing[round_index]:
                if policy not in kept[round_index + 1]:
                    dropped[policy] = round_index
                    for number_, (end, batch) in running.pop(policy, {}).items():
                        stopped.add(number_)  # stops at once: what it ran is spent
                        discarded += batch.duration - (end - now)
                        discarded_batches += 1
                        free += 1
            release_up_to(round_index + 1 + look_ahead, plan.racing[round_index + 1])
            decide_when_ready(round_index + 1)
        start_free()
    return Speculated(finished, useful, discarded, discarded_batches)


def wrong_drop(rates: np.ndarray, plan: RacePlan, scenario: Scenario) -> bool:
    """Whether the sweep dropped a policy whose null holds (as scripts/bench_adaptive.py counts it)."""
    task_mean = rates.mean(axis=-1)
    reference = task_mean.max() if scenario.drop == "worse-than-best" else task_mean[0]
    null_holds = task_mean >= reference - scenario.margin - NULL_TOLERANCE
    return any(null_holds[p] for p in range(len(task_mean)) if p not in plan.racing[-1])


@dataclass
class Sweep:
    rates: np.ndarray
    plan: RacePlan
    batches: dict[tuple[int, int], list[Batch]]
    discardable: dict[tuple[int, int], list[Batch]]


def barrier_table(scenario: Scenario, sweeps: list[Sweep], args: argparse.Namespace, started: float) -> None:
    early_share = np.mean(
        [
            sum(len(s.batches.get((p, r + 1), [])) for r, sure in enumerate(s.plan.surely) for p in sure)
            / sum(len(items) for key, items in s.batches.items() if key[1] > 0)
            for s in sweeps
        ]
    )
    for workers in args.workers:
        spans = {mode: [] for mode in MODES}
        utilisation = {mode: [] for mode in MODES}
        for sweep in sweeps:
            for mode in MODES:
                span, busy = simulate(sweep.plan, sweep.batches, workers, mode, args.decision_s)
                spans[mode].append(span)
                utilisation[mode].append(busy / (workers * span))
        ratio = np.mean(np.array(spans["early"]) / np.array(spans["barrier"]))
        cells = [f"{100 * np.mean(utilisation[mode]):.1f} %" for mode in MODES]
        print(
            f"| {scenario.label} ({scenario.drop}) | {workers} | "
            + " | ".join(cells)
            + f" | {ratio:.3f} | {100 * early_share:.0f} % | {time.perf_counter() - started:.1f} |"
        )


def speculative_table(scenario: Scenario, sweeps: list[Sweep], args: argparse.Namespace, started: float) -> None:
    total = len(scenario.rates) * args.tasks * args.episodes
    kept = [sum(len(items) for items in s.batches.values()) * args.batch_size for s in sweeps]
    wrong = np.mean([wrong_drop(s.rates, s.plan, scenario) for s in sweeps])
    for workers in args.workers:
        bound = np.array([simulate(s.plan, s.batches, workers, "no barrier", args.decision_s)[0] for s in sweeps])
        early = np.array(
            [simulate(s.plan, s.batches, workers, "early, rounds first", args.decision_s)[0] for s in sweeps]
        )
        for look_ahead in args.speculate_rounds:
            runs = [
                simulate_speculative(s.plan, s.batches, s.discardable, workers, look_ahead, args.decision_s)
                for s in sweeps
            ]
            spans = np.array([run.span for run in runs])
            blind = np.array(
                [
                    simulate_speculative(
                        s.plan, s.batches, s.discardable, workers, look_ahead, args.decision_s, False
                    ).span
                    for s in sweeps
                ]
            )
            spent = [k + run.discarded_batches * args.batch_size for k, run in zip(kept, runs, strict=True)]
            print(
                f"| {scenario.label} ({scenario.drop}) | {workers} | {look_ahead} "
                f"| {np.mean(early / bound):.3f} | {np.mean(spans / bound):.3f} | {np.mean(blind / bound):.3f} "
                f"| {100 * np.mean([r.useful / (workers * r.span) for r in runs]):.1f} % "
                f"| {100 * np.mean([(r.useful + r.discarded) / (workers * r.span) for r in runs]):.1f} % "
                f"| {100 * np.mean([r.discarded / (r.useful + r.discarded) for r in runs]):.1f} % "
                f"| {100 * (1 - np.mean(kept) / total):.1f} % | {100 * (1 - np.mean(spent) / total):.1f} % "
                f"| {100 * wrong:.1f} % | {time.perf_counter() - started:.1f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--round-episodes", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=5)
    parser.add_argument("--min-episodes", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--coupling", type=float, default=0.5)
    parser.add_argument("--spread", type=float, default=0.1)
    parser.add_argument("--decision-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--speculate-rounds",
        type=int,
        nargs="*",
        default=[],
        metavar="K",
        help="also print the speculative table: racing policies' rounds up to K past the next one run while "
        "the finalists race (the setting adaptive.speculate_rounds)",
    )
    parser.add_argument("--only-speculative", action="store_true", help="skip the barrier / early-start table")
    args = parser.parse_args()
    if args.round_episodes % args.batch_size:
        parser.error("--round-episodes must be a multiple of --batch-size (as the adaptive block requires)")
    print(
        f"{args.sweeps} simulated sweeps per row: 10 policies x {args.tasks} tasks x {args.episodes} episodes, "
        f"rounds of {args.round_episodes} in batches of {args.batch_size}, decisions from {args.min_episodes} on, "
        f"alpha {args.alpha}, coupling {args.coupling}; LIBERO CPU timings; decision {args.decision_s} s"
    )
    tables = []
    if not args.only_speculative:
        header = (
            "scenario",
            "workers",
            *(f"util. {mode}" for mode in MODES),
            "span early / barrier",
            "early-started batches",
            "seconds",
        )
        tables.append((header, barrier_table))
    if args.speculate_rounds:
        header = (
            "scenario",
            "workers",
            "K",
            "span / no-barrier: early, rounds first",
            "speculative",
            "speculative, longest first",
            "util. (kept work)",
            "busy (kept + discarded)",
            "discarded share",
            "saved without speculation",
            "saved, discarded spent",
            "sweeps w/ wrong drop",
            "seconds",
        )
        tables.append((header, speculative_table))
    scenarios = []
    for scenario in SCENARIOS:
        rng, spare = np.random.default_rng(args.seed), np.random.default_rng(args.seed + 1)
        sweeps = []
        for _ in range(args.sweeps):
            rates, outcomes = draw_outcomes(scenario.rates, args, 1, rng)
            plan = race_plan(outcomes[0], scenario, args)
            batches = batch_times(outcomes[0], plan, args, rng)
            sweeps.append(Sweep(rates[0], plan, batches, discardable_times(outcomes[0], plan, args, spare)))
        scenarios.append((scenario, sweeps))
    for header, table in tables:
        print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for scenario, sweeps in scenarios:
            table(scenario, sweeps, args, time.perf_counter())


if __name__ == "__main__":
    main()
