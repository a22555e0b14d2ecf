"""The decision after each round of an adaptive sweep, and what the comparison says of it.

The decision job of round r reads the validated batches of every policy for the rounds it was evaluated in (only
finished rounds: Snakemake runs the job once its round's batches exist), decides with evalwf.report.sequential
which racing policies stop, and writes round-<r>.json: the policies that continue and, for every policy dropped so
far, when and why (its e-value against the threshold, and the anytime-valid interval of its difference to the
reference). Decisions depend only on finished rounds' outcomes, so the same campaign reaches the same decisions.
It also names the continuing policies that no outcome of the next round can drop (`surely_continuing`): the
workflow plans the round after next for them at once, so workers need not idle while a round drains.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from evalwf.common.atomic import atomic_write_text
from evalwf.plan.campaign import Campaign
from evalwf.plan.manifest import load_manifest
from evalwf.plan.results import validate_batch_result
from evalwf.plan.rounds import (
    AdaptiveSettings,
    cancelled_marker_episodes,
    decision_path,
    discarded_batches,
    round_batches,
    round_count,
    round_end,
    written_decisions,
)
from evalwf.report.sequential import confidence_sequence, decide, surely_continuing


def policy_outcomes(campaign: Campaign, benchmark: str, policy: str, rounds: int) -> np.ndarray:
    """0/1 success (episodes per task evaluated, tasks) of `policy` over its first `rounds` rounds, every batch
    validated against the plan first."""
    member = campaign.member(policy)
    tasks = member.tasks_of(benchmark)
    outcomes = np.full((round_end(campaign, benchmark, rounds - 1), len(tasks)), np.nan)
    manifests: dict[str, dict[str, Any]] = {}
    for round_index in range(rounds):
        for batch in round_batches(member, benchmark, round_index):
            plan = member.task_plan(batch.ref.benchmark, batch.ref.suite, batch.ref.task)
            if not Path(batch.path).exists():
                raise FileNotFoundError(
                    f"{batch.path}: the batch of round {round_index} of {policy} has no result; a decision reads "
                    "finished rounds only (rerun snakemake to finish it)"
                )
            if plan.manifest_path not in manifests:
                manifests[plan.manifest_path] = load_manifest(plan.manifest_path, plan.manifest_hash)
            result = validate_batch_result(batch.path, member.expectation(batch, manifests[plan.manifest_path]))
            column = tasks.index(plan)
            for record in result["episodes"]:
                outcomes[record["index"], column] = float(bool(record["success"]))
    return outcomes


def _paired(better: np.ndarray, worse: np.ndarray) -> np.ndarray:
    cycles = min(better.shape[0], worse.shape[0])
    return better[:cycles] - worse[:cycles]


def anytime_intervals(
    campaign: Campaign, benchmark: str, outcomes: dict[str, np.ndarray], settings: AdaptiveSettings
) -> tuple[str, float, dict[str, tuple[float, float]]]:
    """The reference (the baseline, or the best observed policy among the longest evaluated), the level, and each
    other policy's anytime-valid interval for (reference - policy), in percentage points. The level is alpha over
    the number of pairs the reference could have been picked from, so that picking it after the data is harmless."""
    names = list(outcomes)
    if settings.drop == "worse-than-baseline":
        reference, pairs = campaign.baseline_of(benchmark), len(names) - 1
    else:
        longest = max(array.shape[0] for array in outcomes.values())
        finalists = [name for name in names if outcomes[name].shape[0] == longest]
        reference = max(finalists, key=lambda name: float(outcomes[name].mean()))
        pairs = len(names) * (len(names) - 1) // 2
    level = settings.alpha / max(pairs, 1)
    intervals = {}
    for name in names:
        if name != reference:
            low, high = confidence_sequence(_paired(outcomes[reference], outcomes[name]), level)
            intervals[name] = (round(100 * low, 1), round(100 * high, 1))
    return reference, level, intervals


def surely_continuing_after(
    campaign: Campaign, benchmark: str, round_index: int, outcomes: dict[str, np.ndarray], racing: list[str]
) -> list[str]:
    """The policies `racing` in round `round_index` that its decision cannot drop, whatever the round's outcomes,
    from `outcomes` of every policy before it: all when the round ends before min_episodes (its decision drops
    nobody), else those evalwf.report.sequential.surely_continuing certifies. Their round `round_index` + 1 would
    be planned after that decision anyway, so it may be planned now."""
    settings = AdaptiveSettings.of(campaign.config)
    assert settings is not None
    if round_end(campaign, benchmark, round_index) < settings.min_episodes:
        return list(racing)
    return surely_continuing(
        outcomes,
        racing,
        round_end(campaign, benchmark, round_index) - round_end(campaign, benchmark, round_index - 1),
        alpha=settings.alpha,
        drop=settings.drop,
        margin=settings.margin,
        baseline=campaign.baseline_of(benchmark),
    )


def surely_continuing_from_start(campaign: Campaign, benchmark: str) -> list[str]:
    """The policies whose round 1 may be planned with round 0: from the config alone (nothing is evaluated yet)."""
    names = list(campaign.assignment[benchmark])
    tasks = len(campaign.member(names[0]).tasks_of(benchmark))
    return surely_continuing_after(campaign, benchmark, 0, {name: np.zeros((0, tasks)) for name in names}, names)


def decide_round(campaign: Campaign, benchmark: str, round_index: int, output: str) -> dict[str, Any]:
    """Write round `round_index`'s decision to `output` (decision_path) and return it."""
    settings = AdaptiveSettings.of(campaign.config)
    if settings is None:
        raise ValueError("a round's decision needs an adaptive campaign (config key 'adaptive')")
    if not 0 <= round_index < round_count(campaign, benchmark) - 1:
        raise ValueError(f"{benchmark}: no decision after round {round_index} (the last round needs none)")
    names = list(campaign.assignment[benchmark])
    previous = read_decision(campaign, benchmark, round_index - 1) if round_index else None
    racing = previous["continuing"] if previous else names
    history: dict[str, Any] = previous["dropped"] if previous else {}
    rounds = {name: history[name]["rounds"] if name in history else round_index + 1 for name in names}
    outcomes = {name: policy_outcomes(campaign, benchmark, name, rounds[name]) for name in names}
    episodes = round_end(campaign, benchmark, round_index)
    verdicts = {}
    if episodes >= settings.min_episodes:
        verdicts = decide(
            outcomes,
            racing,
            alpha=settings.alpha,
            drop=settings.drop,
            margin=settings.margin,
            baseline=campaign.baseline_of(benchmark),
        )
    reference, level, intervals = anytime_intervals(campaign, benchmark, outcomes, settings)
    continuing = [name for name in racing if not (name in verdicts and verdicts[name].drop)]
    for name in racing:
        if name not in continuing:
            verdict = verdicts[name]
            history[name] = {
                "round": round_index,
                "rounds": round_index + 1,
                "episodes_per_task": episodes,
                "e_value": round(verdict.e_value, 3),
                "threshold": round(math.exp(verdict.log_threshold), 3),
                "against": verdict.strongest,
                "interval_pp": intervals.get(name),
                "interval_vs": reference,
                "interval_level": level,
            }
    decision = {
        "benchmark": benchmark,
        "round": round_index,
        "episodes_per_task": episodes,
        "adaptive": campaign.config.adaptive_block(),  # what decides (speculate_rounds only schedules)
        "policies": names,
        "racing": racing,
        "continuing": continuing,
        "dropped": history,
        "e_values": {name: round(verdict.e_value, 3) for name, verdict in verdicts.items()},
        # whose round after next is planned now: no outcome of the next round can drop them
        "surely_continuing": (
            surely_continuing_after(campaign, benchmark, round_index + 1, outcomes, continuing)
            if round_index + 2 < round_count(campaign, benchmark)
            else []
        ),
    }
    atomic_write_text(output, json.dumps(decision, indent=2) + "\n")
    return decision


def read_decision(campaign: Campaign, benchmark: str, round_index: int) -> dict[str, Any]:
    return json.loads(Path(decision_path(campaign, benchmark, round_index)).read_text(encoding="utf-8"))


def sweep_outcome(campaign: Campaign, benchmark: str) -> dict[str, dict[str, Any]]:
    """Per policy, what the adaptive sweep did: dropped after which round and why, or evaluated in full, and its
    anytime-valid interval for (policy - reference) in percentage points over everything it evaluated."""
    settings = AdaptiveSettings.of(campaign.config)
    assert settings is not None
    rounds = round_count(campaign, benchmark)
    dropped = read_decision(campaign, benchmark, rounds - 2)["dropped"]
    names = list(campaign.assignment[benchmark])
    outcomes = {
        name: policy_outcomes(campaign, benchmark, name, dropped[name]["rounds"] if name in dropped else rounds)
        for name in names
    }
    reference, level, intervals = anytime_intervals(campaign, benchmark, outcomes, settings)
    discarded = discarded_batches(campaign, benchmark, written_decisions(campaign, benchmark))
    full = round_end(campaign, benchmark, rounds - 1)
    rows = {}
    for name in names:
        record = dropped.get(name)
        low, high = intervals.get(name, (math.nan, math.nan))
        tasks = outcomes[name].shape[1]
        # speculative batches run after the policy's drop: never read, but spent (a cancelled one: what it ran)
        wasted = 0
        for batch in campaign.member(name).batches(benchmark):
            if batch.path in discarded.get(name, []):
                ran = cancelled_marker_episodes(batch.path)
                wasted += batch.episodes.count if ran is None else ran
        rows[name] = {
            "adaptive": f"dropped after round {record['round']}" if record else "evaluated in full",
            "episodes_per_task": int(outcomes[name].shape[0]),
            "episodes_spent": int(outcomes[name].shape[0]) * tasks + wasted,
            "discarded_episodes": wasted,
            "episodes_full": full * tasks,
            "e_value": record["e_value"] if record else math.nan,
            "e_threshold": record["threshold"] if record else math.nan,
            "e_against": record["against"] if record else "",
            "anytime_vs": "" if name == reference else reference,
            "anytime_low_pp": -high,
            "anytime_high_pp": -low,
            "anytime_level": level,
        }
    return rows
