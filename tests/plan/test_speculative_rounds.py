"""Speculative rounds (adaptive.speculate_rounds K): which policies' rounds are asked for ahead of the decisions
that plan them, which of those a drop discards, and that a discarded batch must not start. Pure functions, plus a
sweep made to order for the check the job step runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import standin_server
from runkit import fabricate_sweep

from evalwf.common.errors import ResultValidationError
from evalwf.contract.sim_request import BatchRequest, StopIfDropped
from evalwf.job import sim_step
from evalwf.plan.inventory import survey
from evalwf.plan.results import validate_batch_result
from evalwf.plan.rounds import (
    batch_round,
    cancelled_speculation,
    decision_path,
    discarded_rounds,
    dropped_before,
    round_batches,
    round_progress,
    speculation_watch,
    speculative_policies,
)
from evalwf.report.adaptive import decide_round
from evalwf.rules import jobs

# continuing after decision 0: a, b, c; after 1: a, b (c dropped); after 2: a (b dropped)
CONTINUING = {0: ["a", "b", "c"], 1: ["a", "b"], 2: ["a"]}
POLICIES = ["a", "b", "c", "d"]  # d dropped by decision 0


def continuing_after(round_index: int) -> list[str]:
    return CONTINUING[round_index]


def test_round_q_is_asked_for_every_policy_racing_after_decision_q_minus_1_minus_k():
    # K = 1: round q once decision q - 2 is written (the decision early starts read, all it lets continue)
    assert [speculative_policies(q, 1, POLICIES, continuing_after) for q in (1, 2, 3, 4)] == [
        POLICIES,  # before any decision: every policy
        ["a", "b", "c"],
        ["a", "b"],
        ["a"],
    ]
    # K = 2: one round further ahead, so from an earlier decision (rounds 1 and 2 from the config alone)
    assert [speculative_policies(q, 2, POLICIES, continuing_after) for q in (1, 2, 3, 4, 5)] == [
        POLICIES,
        POLICIES,
        ["a", "b", "c"],
        ["a", "b"],
        ["a"],
    ]
    with pytest.raises(ValueError, match="speculate_rounds"):
        speculative_policies(2, 0, POLICIES, continuing_after)


def test_a_drop_discards_the_k_rounds_after_it_and_none_past_the_last_round():
    assert list(discarded_rounds(1, 10, 1)) == [2]
    assert list(discarded_rounds(1, 10, 3)) == [2, 3, 4]
    assert list(discarded_rounds(7, 10, 3)) == [8, 9]  # rounds 0..9
    assert list(discarded_rounds(1, 10, 0)) == []  # no speculation: an early start is never discarded
    # every discarded round was asked for before the drop: its policy raced after decision round - 1 - K
    for dropped_after, look_ahead in ((1, 1), (2, 2), (3, 3)):
        for round_index in discarded_rounds(dropped_after, 10, look_ahead):
            assert round_index - 1 - look_ahead < dropped_after


def test_a_batch_is_dropped_before_its_round_only_by_a_decision_of_an_earlier_round():
    decisions = [{"dropped": {"d": {"round": 0}}}, {"dropped": {"d": {"round": 0}, "c": {"round": 1}}}]
    assert dropped_before(decisions, "c", 2) == 1 and dropped_before(decisions, "c", 1) is None
    assert dropped_before(decisions, "d", 1) == 0 and dropped_before(decisions, "a", 3) is None
    assert dropped_before(decisions[:1], "c", 2) is None  # decision 1 not written yet: c's round 2 may start


SECTION = {"episodes_per_task": 20, "batch_size": 5}  # 4 rounds of 5 episodes; 3 tasks: 3 batches a round
SUCCESS = {"a": True, "b": True, "c": False}  # a, the baseline, and b solve everything; c nothing


def test_a_dropped_policys_speculative_batch_is_cancelled_before_or_while_it_runs_and_nothing_counts_it(tmp_path):
    adaptive = {"drop": "worse-than-baseline", "min_episodes": 5, "round_episodes": 5, "speculate_rounds": 2}
    campaign = fabricate_sweep(
        tmp_path, list(SUCCESS), lambda p, b: b.episodes.start < 5, lambda p, s, t, i: SUCCESS[p],
        standin=SECTION, adaptive=adaptive,
    )  # fmt: skip
    c_round = {r: round_batches(campaign.member("c"), "standin", r)[0] for r in range(4)}
    assert all(cancelled_speculation(campaign, "c", "standin", c_round[r]) is None for r in range(4))
    # started now, c's round 2 watches decisions 0 and 1 (not written yet) to stop between its episodes
    watch = speculation_watch(campaign, "c", "standin", c_round[2])
    assert watch == StopIfDropped("c", [decision_path(campaign, "standin", r) for r in (0, 1)])
    assert speculation_watch(campaign, "c", "standin", c_round[0]) is None

    decision = decide_round(campaign, "standin", 0, decision_path(campaign, "standin", 0))
    assert decision["continuing"] == ["a", "b"] and "speculate_rounds" not in decision["adaptive"]
    reason = cancelled_speculation(campaign, "c", "standin", c_round[1])
    assert reason and "c was dropped after round 0" in reason and "round-0.json" in reason
    assert cancelled_speculation(campaign, "c", "standin", c_round[0]) is None  # round 0 is what c evaluated
    assert cancelled_speculation(campaign, "a", "standin", round_batches(campaign.member("a"), "standin", 1)[0]) is None

    # the job step ends at once (no policy server, no simulator) with a marker in place of the result: a clear
    # refusal as a result, neither done nor bad in the plan
    jobs.evaluate_batch(campaign.member("c"), *c_round[1].key, c_round[1].path)
    assert json.loads(Path(c_round[1].path).read_text()) == {"cancelled_speculative": reason, "episodes_run": 0}
    with pytest.raises(ResultValidationError, match=r"speculative batch .* cancelled before it ran"):
        validate_batch_result(c_round[1].path, campaign.member("c").expectation(c_round[1], {}))
    inventory = survey(campaign.member("c"))
    assert c_round[1].path not in inventory.done and c_round[1].path not in inventory.bad

    # one already running stops after the episode during which the decision was written (the simulator step,
    # against a real stand-in policy server): a marker in place of the result, saying how far it got
    member = campaign.member("c")
    plan = member.task_plan(*c_round[2].key[:3])
    with standin_server() as url:
        sim_step.run_request(
            BatchRequest(run="t", benchmark="standin", suite=c_round[2].ref.suite, task=c_round[2].ref.task,
                         episode_start=10, episode_count=5, section=member.section("standin"),
                         manifest_path=plan.manifest_path, manifest_hash=plan.manifest_hash, endpoint=url,
                         infer_timeout_s=30, policy_identity=member.policy.identity, output=c_round[2].path,
                         artifacts_dir=str(tmp_path / "artifacts"), stop_if_dropped=watch)
        )  # fmt: skip
    stopped = json.loads(Path(c_round[2].path).read_text())
    assert stopped["cancelled_speculative"].startswith("c was dropped after round 0") and stopped["episodes_run"] == 1
    assert stopped["cancelled_speculative"].endswith("after 1 of its 5 episodes")

    # status: a racing policy has K rounds asked beyond the decisions; the dropped one its discarded batches
    progress = round_progress(campaign, "standin", [decision], [])
    assert progress["a"].planned == progress["b"].planned == 4  # rounds 0..1 planned, 2..3 speculative
    assert (progress["c"].dropped_after, progress["c"].discarded, progress["c"].cancelled) == (0, 0, 2)
    assert batch_round(campaign.config, c_round[1]) == 1
