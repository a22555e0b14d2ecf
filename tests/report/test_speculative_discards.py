"""A speculative batch discarded by a drop never enters a decision: the decision job reaches the same decision, byte
for byte, with and without the dropped policy's speculative batch files (here ones that would change it, had they
been read), and status names them as discarded (speculative). A sweep made to order; the real decision job."""

from __future__ import annotations

from pathlib import Path

from runkit import fabricate_sweep

from evalwf.plan.results import write_cancelled_speculative
from evalwf.plan.rounds import batch_round, decision_path
from evalwf.report import run_state, status
from evalwf.report.adaptive import decide_round, sweep_outcome

SECTION = {"episodes_per_task": 20, "batch_size": 5}  # 4 rounds of 5 episodes; 3 tasks: 3 batches a round
ADAPTIVE = {"drop": "worse-than-best", "min_episodes": 5, "round_episodes": 5, "speculate_rounds": 1}


def success(policy: str, suite: str, task: str, index: int) -> bool:
    """a, the baseline, and b solve everything; c nothing in round 0 (dropped by decision 0), everything after:
    its discarded round 1 would make it look as good as a, were it read."""
    return policy != "c" or index >= 5


def test_a_discarded_speculative_batch_never_enters_a_decision_and_status_names_it(tmp_path):
    def sweep(written):
        return fabricate_sweep(tmp_path, ["a", "b", "c"], written, success, standin=SECTION, adaptive=ADAPTIVE)

    campaign = sweep(lambda policy, batch: batch.episodes.start < 10 and (policy != "c" or batch.episodes.start < 5))
    first = decide_round(campaign, "standin", 0, decision_path(campaign, "standin", 0))
    assert first["dropped"].keys() == {"c"}
    path = decision_path(campaign, "standin", 1)
    decide_round(campaign, "standin", 1, path)
    without = Path(path).read_text()

    # c's speculative round 1 (asked with round 0, K = 1) ran anyway: the decisions do not read it
    sweep(lambda policy, batch: policy == "c" and batch_round(campaign.config, batch) == 1)
    decide_round(campaign, "standin", 1, path)
    assert Path(path).read_text() == without
    decide_round(campaign, "standin", 0, decision_path(campaign, "standin", 0))
    assert decide_round(campaign, "standin", 0, decision_path(campaign, "standin", 0)) == first

    # status and the comparison count it as discarded: spent, never part of c's numbers
    lines = status.round_lines(run_state.adaptive_rounds(campaign))
    [line] = [line for line in lines if line.startswith("  c dropped after round 0")]
    assert "discarded (speculative): 3 batch(es) evaluated and not counted, 0 cancelled" in line
    sweep(lambda policy, batch: policy != "c" and batch.episodes.start >= 10)
    decide_round(campaign, "standin", 2, decision_path(campaign, "standin", 2))
    outcome = sweep_outcome(campaign, "standin")
    assert outcome["c"]["episodes_per_task"] == 5 and outcome["c"]["discarded_episodes"] == 15
    assert outcome["c"]["episodes_spent"] == 5 * 3 + 15 and outcome["a"]["episodes_spent"] == 20 * 3

    # two of them cancelled instead, one before it started, one after 2 of its 5 episodes: counted apart, and only
    # the episodes they ran are spent
    first, second = [b.path for b in campaign.member("c").batches("standin") if b.episodes.start == 5][:2]
    write_cancelled_speculative(first, "dropped")
    write_cancelled_speculative(second, "dropped; stopped after 2 of its 5 episodes", 2)
    assert sweep_outcome(campaign, "standin")["c"]["discarded_episodes"] == 5 + 2
    [line] = [line for line in status.round_lines(run_state.adaptive_rounds(campaign)) if "c dropped" in line]
    assert "1 batch(es) evaluated and not counted, 2 cancelled (before they started, or between episodes)" in line
