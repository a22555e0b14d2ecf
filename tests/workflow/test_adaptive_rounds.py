"""The next round of the policies that surely continue starts before the decision (dry runs on runs made to order):
round 1 with round 0 when the config shows that decision 0 drops nobody, round q as soon as decision q - 2 says
that no outcome of round q - 1 can drop its policy; the decision still reads only its own rounds, and a run that
stopped with the early batches done resumes without running them again."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import job_counts, run_snakemake, write_config
from runkit import fabricate_sweep, sweep_config

from evalwf.plan.rounds import decision_path
from evalwf.report.adaptive import decide_round

SECTION = {"episodes_per_task": 20, "batch_size": 5}  # 4 rounds of 5 episodes; 3 tasks: 3 batches a round
POLICIES = ["a", "b", "c"]


def dry_run(workdir: Path, config: dict) -> tuple[dict[str, int], dict[str, set[str]]]:
    """The job counts and, per rule, the outputs (and for decide_round the inputs, by round) a dry run plans."""
    configfile = write_config(workdir / "sweep.yaml", config)
    out = run_snakemake(workdir, "-n", "--configfile", str(configfile)).stdout
    planned: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=(?:rule|checkpoint) )", out):
        rule = re.match(r"(?:rule|checkpoint) (\w+):", block)
        fields = dict(re.findall(r"^    (input|output|wildcards): (.*)$", block, re.M))
        if rule and "output" in fields:
            planned.setdefault(rule.group(1), set()).update(fields["output"].split(", "))
            if rule.group(1) == "decide_round":
                round_index = re.search(r"round=(\d+)", fields["wildcards"]).group(1)
                planned[f"decide_round {round_index} reads"] = set(fields.get("input", "").split(", "))
    return job_counts(out), planned


def in_round(paths: set[str], round_index: int) -> set[str]:
    """<policy>/<task> of the batch files of round `round_index` (batches of 5, rounds of 5: the batch that starts
    it), from .../<policy>/standin/batches/<suite>/<task>/<start>-5.json."""
    label = f"{5 * round_index:04d}-5.json"
    return {f"{Path(p).parts[-6]}/{Path(p).parts[-2]}" for p in paths if p.endswith(label)}


def test_round_one_starts_with_round_zero_when_decision_zero_drops_nobody(tmp_path):
    config = sweep_config(tmp_path, POLICIES, standin=SECTION, adaptive={"min_episodes": 10, "round_episodes": 5})
    counts, planned = dry_run(tmp_path, config)
    batches = planned["evaluate_batch"]
    assert len(in_round(batches, 0)) == len(in_round(batches, 1)) == 9 and counts["evaluate_batch"] == 18
    assert len(planned["start_round_early"]) == 3  # rounds 1, 2, 3
    assert not in_round(planned["decide_round 0 reads"], 1), "decision 0 reads round 0 only"

    # decisions from round 0 on: nothing is sure before any data, except that the baseline is never dropped
    config["adaptive"]["min_episodes"] = 5
    counts, planned = dry_run(tmp_path, config)
    assert counts["evaluate_batch"] == 9 and not in_round(planned["evaluate_batch"], 1)
    config["adaptive"]["drop"] = "worse-than-baseline"
    counts, planned = dry_run(tmp_path, config)
    assert counts["evaluate_batch"] == 12 and {p.split("/")[0] for p in in_round(planned["evaluate_batch"], 1)} == {"a"}


# a, the baseline, fails everything; b succeeds everywhere (far better: never dropped whatever comes); c is a again
SUCCESS = {"a": False, "b": True, "c": False}


def test_round_two_of_the_surely_continuing_starts_once_decision_zero_is_written_and_resumes(tmp_path):
    adaptive = {"drop": "worse-than-baseline", "min_episodes": 5, "round_episodes": 5}

    def up_to(rounds: dict[str, int]):
        return lambda policy, batch: batch.episodes.start // 5 < rounds[policy]

    campaign = fabricate_sweep(
        tmp_path,
        POLICIES,
        up_to(dict.fromkeys(POLICIES, 1)),
        lambda p, s, t, i: SUCCESS[p],
        standin=SECTION,
        adaptive=adaptive,
    )
    decision = decide_round(campaign, "standin", 0, decision_path(campaign, "standin", 0))
    assert decision["continuing"] == POLICIES and decision["surely_continuing"] == ["a", "b"]

    config = sweep_config(tmp_path, POLICIES, standin=SECTION, adaptive=adaptive)
    counts, planned = dry_run(tmp_path, config)
    batches = planned["evaluate_batch"]
    assert not in_round(batches, 0), "round 0 is done"
    assert {p.split("/")[0] for p in in_round(batches, 1)} == {"a", "b", "c"}
    assert {p.split("/")[0] for p in in_round(batches, 2)} == {"a", "b"}, "c may still be dropped after round 1"
    assert counts["evaluate_batch"] == 9 + 6
    reads = planned["decide_round 1 reads"]
    assert len(in_round(reads, 1)) == 9 and not in_round(reads, 2), "decision 1 never waits for round 2"

    # stopped with round 1 and the early round 2 done, decision 1 not taken: nothing is evaluated again
    fabricate_sweep(
        tmp_path,
        POLICIES,
        lambda p, b: b.episodes.start // 5 == 1 or (p != "c" and b.episodes.start // 5 == 2),
        lambda p, s, t, i: SUCCESS[p],
        standin=SECTION,
        adaptive=adaptive,
    )
    counts, planned = dry_run(tmp_path, config)
    assert "evaluate_batch" not in counts and "decide_round" in counts
    assert len(in_round(planned["decide_round 1 reads"], 1)) == 9
