"""The rounds of an adaptive sweep: which episodes each round holds, which batches of a policy fall in it, where
each round's decision is written, and how many rounds a policy is evaluated in once the decisions are known.

One plan for the Snakefile (its checkpoint reads the decisions), the decision job and the reports, so they cannot
disagree about what a dropped policy evaluated."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalwf.contract.sim_request import StopIfDropped
from evalwf.plan.campaign import BatchPlan, Campaign, PlannedTasks, PolicyCampaign
from evalwf.plan.campaign_config import CampaignConfig
from evalwf.plan.results import CANCELLED_SPECULATIVE, EPISODES_RUN


@dataclass(frozen=True)
class AdaptiveSettings:
    """The validated `adaptive:` block (its defaults come from the schema)."""

    alpha: float
    drop: str
    margin: float  # a fraction of success, from margin_pp
    min_episodes: int
    round_episodes: int
    speculate_rounds: int  # rounds a racing policy runs ahead of the decisions (0: only certain ones early)

    @classmethod
    def of(cls, config: CampaignConfig) -> AdaptiveSettings | None:
        block = config.adaptive
        if block is None:
            return None
        return cls(
            block.alpha,
            block.drop,
            block.margin_pp / 100.0,
            block.min_episodes,
            block.round_episodes,
            block.speculate_rounds,
        )


def adaptive_benchmarks(campaign: Campaign) -> list[str]:
    """The benchmarks that run in rounds: those several policies evaluate, when the campaign is adaptive."""
    return campaign.compared_benchmarks() if AdaptiveSettings.of(campaign.config) else []


def round_count(campaign: PlannedTasks, benchmark: str) -> int:
    settings = AdaptiveSettings.of(campaign.config)
    assert settings is not None
    return math.ceil(campaign.section(benchmark)["episodes_per_task"] / settings.round_episodes)


def round_end(campaign: PlannedTasks, benchmark: str, round_index: int) -> int:
    """Episodes per task evaluated once round `round_index` (from 0) is finished."""
    settings = AdaptiveSettings.of(campaign.config)
    assert settings is not None
    return min((round_index + 1) * settings.round_episodes, campaign.section(benchmark)["episodes_per_task"])


def batch_round(config: CampaignConfig, batch: BatchPlan) -> int:
    """The round a batch lies in (one round: the schema check makes round_episodes a multiple of batch_size)."""
    settings = AdaptiveSettings.of(config)
    assert settings is not None
    return batch.episodes.start // settings.round_episodes


def round_batches(member: PolicyCampaign, benchmark: str, round_index: int) -> list[BatchPlan]:
    """The batches of one policy's campaign that round `round_index` holds."""
    return [b for b in member.batches(benchmark) if batch_round(member.config, b) == round_index]


def decision_path(campaign: PlannedTasks, benchmark: str, round_index: int) -> str:
    """Which policies continue after round `round_index`: written by the round's decision job."""
    return str(campaign.comparison_dir(benchmark) / "rounds" / f"round-{round_index}.json")


def early_round_path(campaign: Campaign, benchmark: str, round_index: int) -> str:
    """What the early start of round `round_index` asked for (the workflow's target that plans it early)."""
    return str(campaign.comparison_dir(benchmark) / "rounds" / f"early-{round_index}.txt")


def early_round_targets(campaign: Campaign) -> list[str]:
    """One early-start target per round from 1 on of every adaptive benchmark (round 0 starts at once)."""
    return [
        early_round_path(campaign, benchmark, round_index)
        for benchmark in adaptive_benchmarks(campaign)
        for round_index in range(1, round_count(campaign, benchmark))
    ]


def speculate_rounds(campaign: Campaign) -> int:
    """How many rounds a racing policy's batches may run ahead of the decisions (`adaptive.speculate_rounds`)."""
    settings = AdaptiveSettings.of(campaign.config)
    return settings.speculate_rounds if settings else 0


def speculative_policies(
    round_index: int, look_ahead: int, policies: list[str], continuing_after: Callable[[int], list[str]]
) -> list[str]:
    """With a look-ahead K >= 1, the policies whose round `round_index` is asked for before the decisions that
    plan it: those still racing after decision round_index - 1 - K (every policy while that decision lies before
    round 0), asked as soon as that decision is written. Some of them a later decision may drop: their batches of
    this round are then discarded (`discarded_rounds`)."""
    if look_ahead < 1:
        raise ValueError("speculative rounds need a look-ahead of at least 1 (adaptive.speculate_rounds)")
    deciding = round_index - 1 - look_ahead
    return list(policies) if deciding < 0 else continuing_after(deciding)


def discarded_rounds(dropped_after: int, rounds: int, look_ahead: int) -> range:
    """The rounds of a policy dropped by decision `dropped_after` that were asked for speculatively before that
    decision (the K rounds after its last; none without speculation): whatever of them ran is discarded, never
    read by a decision or a summary, and counted as spent."""
    return range(dropped_after + 1, min(dropped_after + look_ahead, rounds - 1) + 1)


def dropped_before(decisions: list[dict[str, Any]], policy: str, round_index: int) -> int | None:
    """The round after which a written decision dropped `policy` when that lies before `round_index` (its batch
    of that round is then discarded, and must not start), else None. `decisions`: written_decisions."""
    for decision in decisions[:round_index]:
        record = decision.get("dropped", {}).get(policy)
        if record and int(record["round"]) < round_index:
            return int(record["round"])
    return None


def rounds_evaluated(rounds: int, policy: str, continuing_after: Callable[[int], list[str]]) -> int:
    """How many rounds `policy` is evaluated in: up to and including the first round after which it does not
    continue (all of them if it never stops). `continuing_after(r)` reads round r's decision."""
    for round_index in range(rounds - 1):
        if policy not in continuing_after(round_index):
            return round_index + 1
    return rounds


def read_continuing(path: str | Path) -> list[str]:
    """The policies a written decision lets continue."""
    return list(json.loads(Path(path).read_text(encoding="utf-8"))["continuing"])


def read_surely_continuing(path: str | Path) -> list[str]:
    """The policies whose round after next a written decision lets start before the next decision (none in a
    decision written before it said so)."""
    return list(json.loads(Path(path).read_text(encoding="utf-8")).get("surely_continuing", []))


def planned_batches(
    campaign: Campaign,
    benchmark: str,
    policy: str,
    continuing_after: Callable[[int], list[str]],
    rounds: int | None = None,
) -> list[BatchPlan]:
    """Every batch `policy` evaluates of an adaptive benchmark in its first `rounds` rounds (all: None), in round
    order; only the decisions before the last of those rounds are read."""
    member = campaign.member(policy)
    rounds = round_count(campaign, benchmark) if rounds is None else rounds
    evaluated = rounds_evaluated(rounds, policy, continuing_after)
    return [batch for r in range(evaluated) for batch in round_batches(member, benchmark, r)]


def written_decisions(campaign: PlannedTasks, benchmark: str) -> list[dict[str, Any]]:
    """The decisions written so far, in round order (each one is taken only after the one before it)."""
    decisions = []
    for round_index in range(round_count(campaign, benchmark) - 1):
        path = Path(decision_path(campaign, benchmark, round_index))
        if not path.exists():
            break
        decisions.append(json.loads(path.read_text(encoding="utf-8")))
    return decisions


@dataclass(frozen=True)
class RoundProgress:
    """Where one policy of an adaptive benchmark stands by the decisions written so far."""

    planned: int  # its rounds whose batches are planned (the later ones wait for a decision)
    dropped_after: int | None  # the round after which it stopped, if it did
    discarded: int = 0  # its speculative batches after the drop that ran anyway (spent, never read)
    cancelled: int = 0  # those cancelled before they started or between episodes (a marker in their place)


def round_progress(
    campaign: Campaign, benchmark: str, decisions: list[dict[str, Any]], first_early: list[str]
) -> dict[str, RoundProgress]:
    """Each policy's progress by the `decisions` written (written_decisions): a dropped one ran up to its round;
    a racing one has the round after the last decision planned, and one more where that decision said it surely
    continues (before any decision: `first_early`, the policies whose round 1 starts with round 0), or the
    speculate_rounds more that run ahead of the decisions."""
    rounds = round_count(campaign, benchmark)
    look_ahead = speculate_rounds(campaign)
    last = decisions[-1] if decisions else None
    early = list(last.get("surely_continuing", [])) if last else first_early
    progress = {}
    discarded = discarded_batches(campaign, benchmark, decisions)
    for name in campaign.assignment[benchmark]:
        dropped = last["dropped"].get(name) if last else None
        if dropped:
            cancelled = sum(is_cancelled_marker(path) for path in discarded.get(name, []))
            spent = len(discarded.get(name, [])) - cancelled
            progress[name] = RoundProgress(int(dropped["rounds"]), int(dropped["round"]), spent, cancelled)
        else:
            ahead = max(look_ahead, int(name in early))
            progress[name] = RoundProgress(min(rounds, len(decisions) + 1 + ahead), None)
    return progress


def discarded_batches(campaign: Campaign, benchmark: str, decisions: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per dropped policy, the paths of its speculative batches that exist (ran, or were cancelled: a marker then,
    is_cancelled_marker) in the rounds after its drop: discarded, counted as spent."""
    look_ahead = speculate_rounds(campaign)
    if not decisions or not look_ahead:
        return {}
    rounds = round_count(campaign, benchmark)
    found = {}
    for name, record in decisions[-1]["dropped"].items():
        later = discarded_rounds(int(record["round"]), rounds, look_ahead)
        paths = [
            batch.path
            for r in later
            for batch in round_batches(campaign.member(name), benchmark, r)
            if Path(batch.path).exists()
        ]
        if paths:
            found[name] = paths
    return found


def written_batches(campaign: Campaign, benchmark: str, policy: str) -> set[str]:
    """The paths of `policy`'s batches by the decisions written so far (what its summary counts)."""
    return {
        batch.path
        for batch in planned_batches(
            campaign, benchmark, policy, lambda r: read_continuing(decision_path(campaign, benchmark, r))
        )
    }


def first_droppable_round(campaign: Campaign, benchmark: str) -> int:
    """The first round after which a decision can drop a policy: the first that ends at min_episodes or later
    (the last round when none before it does: its decision stops nothing)."""
    settings = AdaptiveSettings.of(campaign.config)
    assert settings is not None
    rounds = round_count(campaign, benchmark)
    for round_index in range(rounds - 1):
        if round_end(campaign, benchmark, round_index) >= settings.min_episodes:
            return round_index
    return rounds - 1


def _stop_spread(rounds: int, surely_until: int) -> list[float]:
    """P(a policy evaluates round r) when it surely evaluates rounds 0..surely_until and then stops after any later
    round with equal chance (uniform over surely_until + 1 .. rounds rounds evaluated)."""
    if surely_until >= rounds - 1:
        return [1.0] * rounds
    return [1.0 if r <= surely_until else (rounds - r) / (rounds - surely_until) for r in range(rounds)]


def round_probabilities(campaign: Campaign, benchmark: str) -> dict[str, list[float]]:
    """Per policy of an adaptive benchmark, the probability that it evaluates each round: what a plan prices its
    batches at (the full sweep, every probability 1, is the upper bound). Decisions written so far are facts (a
    dropped policy evaluates no later round; a racing one at least the round after the last decision). Beyond
    them nothing about the policies is known, so the plan assumes: a policy that can still be dropped stops after
    any of the rounds from the first decision that can drop it on with equal chance, except that one of the racing
    policies is the best (worse-than-best: each racing policy is it with chance 1/M) or the baseline
    (worse-than-baseline) and runs every round."""
    settings = AdaptiveSettings.of(campaign.config)
    assert settings is not None
    rounds = round_count(campaign, benchmark)
    decisions = written_decisions(campaign, benchmark)
    dropped = decisions[-1]["dropped"] if decisions else {}
    racing = [name for name in campaign.assignment[benchmark] if not dropped.get(name)]
    surely_until = max(first_droppable_round(campaign, benchmark), len(decisions))
    spread = _stop_spread(rounds, surely_until)
    baseline = campaign.baseline_of(benchmark)
    found: dict[str, list[float]] = {}
    for name in campaign.assignment[benchmark]:
        if dropped.get(name):
            evaluated = int(dropped[name]["rounds"])
            found[name] = [1.0 if r < evaluated else 0.0 for r in range(rounds)]
        elif len(racing) == 1 or (settings.drop == "worse-than-baseline" and name == baseline):
            found[name] = [1.0] * rounds
        elif settings.drop == "worse-than-baseline":
            found[name] = spread
        else:
            best = 1.0 / len(racing)
            found[name] = [best + (1 - best) * p for p in spread]
    return found


def expected_batch_weights(campaign: Campaign) -> dict[str, float]:
    """Batch path -> the probability that the batch is evaluated, for the batches of adaptive benchmarks (every
    other batch is evaluated: weight 1, left out)."""
    weights: dict[str, float] = {}
    for benchmark in adaptive_benchmarks(campaign):
        for name, chances in round_probabilities(campaign, benchmark).items():
            for batch in campaign.member(name).batches(benchmark):
                weights[batch.path] = chances[batch_round(campaign.config, batch)]
    return weights


def _speculating(campaign: PlannedTasks, benchmark: str) -> bool:
    """Whether `benchmark` runs in rounds (an adaptive campaign, several of whose policies evaluate it)."""
    return campaign.config.adaptive is not None and len(campaign.config.benchmark_policies()[benchmark]) > 1


def cancelled_speculation(campaign: PlannedTasks, policy: str, benchmark: str, batch: BatchPlan) -> str | None:
    """Why `policy`'s `batch` of an adaptive benchmark must not start: a written decision dropped the policy before
    the batch's round (it was asked for speculatively), else None. The job step checks this before it starts the
    policy server (`campaign`: the sweep or the policy's own campaign: both find the decisions)."""
    if not _speculating(campaign, benchmark):
        return None
    round_index = batch_round(campaign.config, batch)
    dropped = dropped_before(written_decisions(campaign, benchmark), policy, round_index)
    if dropped is None:
        return None
    return (
        f"{policy} was dropped after round {dropped} ({decision_path(campaign, benchmark, dropped)}): its "
        f"speculative batch of round {round_index} is discarded, not evaluated"
    )


def speculation_watch(campaign: PlannedTasks, policy: str, benchmark: str, batch: BatchPlan) -> StopIfDropped | None:
    """What the simulator step of `policy`'s `batch` watches to stop between episodes: the decisions before its
    round not written yet (a batch started ahead of them, speculatively or early); None when there are none."""
    if not _speculating(campaign, benchmark):
        return None
    waiting = [
        path
        for path in (decision_path(campaign, benchmark, r) for r in range(batch_round(campaign.config, batch)))
        if not Path(path).exists()
    ]
    return StopIfDropped(policy, waiting) if waiting else None


def is_cancelled_marker(path: str | Path) -> bool:
    """Whether a batch file is the marker of a cancelled speculative batch (evalwf.plan.results), not a result."""
    return cancelled_marker_episodes(path) is not None


def cancelled_marker_episodes(path: str | Path) -> int | None:
    """How many episodes a cancelled speculative batch ran before it stopped (0: it never started); None when
    `path` is no such marker (a result, or nothing readable)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or CANCELLED_SPECULATIVE not in data:
        return None
    return int(data.get(EPISODES_RUN, 0))
