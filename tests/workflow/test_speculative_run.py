"""Speculative rounds for real (the local profile, stand-in policies): with adaptive.speculate_rounds 1 every
policy's round 1 is asked for with round 0; the policy decision 0 drops keeps only round 0 in its summary, its
round-1 batches (evaluated before the drop, or cancelled by the job step after it) are counted as discarded, the
decision read none of them, and a rerun evaluates nothing more."""

from __future__ import annotations

import json
import re

import pandas as pd
from conftest import REPO, job_counts, run_snakemake, write_config
from runkit import sweep_config

from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.report import run_state, status

NOISE = {"a": 0.0, "c": 4.0}  # a, the baseline, solves everything, c nothing: dropped after round 0


def test_a_dropped_policys_speculative_round_is_discarded_not_summarised(tmp_path):
    config = sweep_config(
        tmp_path,
        list(NOISE),
        # one task, two rounds of one batch: after round 0 c's capital is 1.5^4 = 5.1 >= 1 / alpha
        standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 10, "batch_size": 5, "max_steps": 10},
        adaptive={"alpha": 0.3, "drop": "worse-than-baseline", "min_episodes": 5, "speculate_rounds": 1},
    )
    for block in config["policies"]:
        noise = NOISE[block["name"]]
        block["command"] = f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --noise {noise}"
    configfile = write_config(tmp_path / "sweep.yaml", config)
    profile = ["--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile)]

    root = tmp_path / "results" / "t"
    # what the test reads: c's summary and the early start (the comparison's count: tests/report)
    targets = [
        str(root / "c" / "standin" / "task_summary.csv"),
        str(root / "comparison" / "standin" / "rounds" / "early-1.txt"),
    ]
    preview = run_snakemake(tmp_path, "-n", *targets, *profile[2:]).stdout
    assert job_counts(preview)["evaluate_batch"] == 2 * 2, "c's round 1 is asked with round 0 (else only a's)"
    [reads] = re.findall(r"checkpoint decide_round:\n    input: (.*)", preview)
    assert "0000-5.json" in reads and "0005-5.json" not in reads, "decision 0 waits for round 0 only"
    run_snakemake(tmp_path, *targets, *profile)
    decision = json.loads((root / "comparison" / "standin" / "rounds" / "round-0.json").read_text())
    assert decision["continuing"] == ["a"] and list(decision["dropped"]) == ["c"]
    # c's round 1 ended one way or the other (run, or cancelled before it started), and is no part of c's numbers
    speculative = sorted((root / "c" / "standin" / "batches").rglob("0005-5.json"))
    assert len(speculative) == 1
    cancelled = sum("cancelled_speculative" in json.loads(path.read_text()) for path in speculative)
    tasks = pd.read_csv(root / "c" / "standin" / "task_summary.csv")
    assert set(tasks["episodes"]) == {5}, "c's summary covers round 0 only"
    campaign = Campaign(validate_config(config))
    [line] = [line for line in status.round_lines(run_state.adaptive_rounds(campaign)) if "c dropped" in line]
    assert f"discarded (speculative): {1 - cancelled} batch(es) evaluated and not counted, {cancelled} canc" in line
    early = (root / "comparison" / "standin" / "rounds" / "early-1.txt").read_text()
    assert early.count("discarded (speculative): cancelled") == cancelled

    again = run_snakemake(tmp_path, "-n", *targets, *profile[2:])
    assert "evaluate_batch" not in job_counts(again.stdout), again.stdout[-2000:]
