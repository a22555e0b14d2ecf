"""`evalwf status` of an adaptive sweep reads its written decisions (a run made to order: batch files and the real
decision job's files): a dropped policy shows as dropped after its round with the batches it evaluated, the rounds
no decision has planned yet wait for one instead of looking like missing work, and a finished sweep is complete."""

from __future__ import annotations

import pandas as pd
from runkit import fabricate_sweep

from evalwf.plan.rounds import decision_path
from evalwf.report import run_state, status
from evalwf.report.adaptive import decide_round
from evalwf.rules.jobs import record_campaign

SECTION = {"episodes_per_task": 20, "batch_size": 5}  # 4 rounds of 5 episodes, 3 tasks: 3 batches a round
ADAPTIVE = {"drop": "worse-than-baseline", "min_episodes": 5, "round_episodes": 5}
# a is the baseline; b is as good; c solves nothing: dropped after round 0. The baseline always runs to the end,
# so its round 2 starts with round 1 (decision 0 says so); b's waits for decision 1.
SUCCESS = {"a": True, "b": True, "c": False}


def sweep(tmp_path, written):
    return fabricate_sweep(
        tmp_path, list(SUCCESS), written, lambda p, s, t, i: SUCCESS[p], standin=SECTION, adaptive=ADAPTIVE
    )


def show(tmp_path, capsys) -> tuple[int, str, pd.DataFrame]:
    capsys.readouterr()
    code = status.main([str(tmp_path / "results" / "t"), "--workdir", str(tmp_path), "--csv", str(tmp_path / "csv")])
    return code, capsys.readouterr().out, pd.read_csv(tmp_path / "csv" / "status_suites.csv")


def test_status_follows_the_decisions_of_an_adaptive_sweep(tmp_path, capsys):
    campaign = sweep(tmp_path, lambda policy, batch: batch.episodes.start < 5)  # round 0 of everyone
    record_campaign(campaign.config, str(campaign.root / "campaign.yaml"))
    decision = decide_round(campaign, "standin", 0, decision_path(campaign, "standin", 0))
    assert list(decision["dropped"]) == ["c"] and decision["surely_continuing"] == ["a"]
    sweep(tmp_path, lambda policy, batch: policy != "c" and batch.episodes.start == 5)  # round 1 of a and b

    code, out, suites = show(tmp_path, capsys)
    assert code == run_state.EXIT_INCOMPLETE
    # a: rounds 0-1 done, round 2 planned (not submitted), round 3 waits; b: rounds 2-3 wait; c: round 0 only
    assert "run t: 15/27 batches done (no Labtasker queue found" in out
    assert "9 waiting for a round's decision - PARTIAL numbers" in out
    assert "standin: adaptive sweep, 1 round decision(s) written; racing: a, b" in out
    assert "c dropped after round 0 (5 episodes per task): e-value" in out and "against a" in out
    average = suites[suites.suite == "average"].set_index("benchmark")
    assert average.loc["c/standin", "done/total"] == "3/3" and average.loc["c/standin", "waiting"] == 0
    assert average.loc["c/standin", "status"] == "dropped after round 0"
    assert (average.loc["a/standin", "done/total"], average.loc["a/standin", "waiting"]) == ("6/12", 3)
    assert (average.loc["b/standin", "done/total"], average.loc["b/standin", "waiting"]) == ("6/12", 6)
    rows = run_state.batch_rows(campaign, None)
    assert {r["state"] for r in rows if r["benchmark"] == "a/standin" and r["round"] == 2} == {"not submitted"}
    assert {r["state"] for r in rows if r["benchmark"] == "b/standin" and r["round"] >= 2} == {"waiting"}
    assert not [r for r in rows if r["benchmark"] == "c/standin" and r["round"] > 0]

    # the sweep finished: a and b evaluated in full, c still dropped after round 0, and nothing is missing
    sweep(tmp_path, lambda policy, batch: policy != "c" and batch.episodes.start >= 10)
    for round_index in (1, 2):
        decide_round(campaign, "standin", round_index, decision_path(campaign, "standin", round_index))
    code, out, suites = show(tmp_path, capsys)
    assert code == run_state.EXIT_COMPLETE, out
    assert "run t: 27/27 batches done" in out and "waiting" not in out.splitlines()[0]
    statuses = suites[suites.suite == "average"].set_index("benchmark")["status"].to_dict()
    assert statuses == {"a/standin": "complete", "b/standin": "complete", "c/standin": "dropped after round 0"}
