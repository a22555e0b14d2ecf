"""An adaptive sweep end to end: four stand-in policies through profiles/labtasker, a real Labtasker server and two
real workers. The clearly worse policies stop after their first round (their summaries partial, the comparison
saying when and why), the good ones are evaluated in full, and rerunning the same command evaluates nothing more
and reaches the same decisions."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import signal
from pathlib import Path

import pandas as pd
import pytest
from conftest import job_counts, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, all_tasks, client, labtasker_url, queue, workers

pytestmark = pytest.mark.slow

NOISE = {"step-good": 0.1, "step-bad": 3.0, "step-fine": 0.2, "step-worse": 4.0}  # noise 3+ solves nothing
GOOD, BAD = ("step-good", "step-fine"), ("step-bad", "step-worse")
EPISODES, ROUND = 12, 4  # 3 rounds; 3 tasks; batches of 2


def sweep_config(workdir: Path) -> Path:
    config = standin_config(workdir, standin={"episodes_per_task": EPISODES, "batch_size": 2})
    del config["policy"]
    config["policies"] = [
        {"name": name, "command": f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --noise {noise}"}
        for name, noise in NOISE.items()
    ]
    config["adaptive"] = {"alpha": 0.2, "min_episodes": ROUND, "round_episodes": ROUND}
    return write_config(workdir / "sweep.yaml", config)


def batch_files(root: Path, policy: str) -> list[Path]:
    return sorted((root / policy / "standin" / "batches").rglob("*.json"))


def test_an_adaptive_sweep_drops_the_clearly_worse_and_a_rerun_changes_nothing(
    labtasker_url, queue, client, workers, tmp_path
):
    workdir = tmp_path / "adaptive"
    workdir.mkdir()
    configfile = sweep_config(workdir)

    # the dry run plans the first round of every policy and its decision; the rest follows the decisions
    preview = run_snakemake(workdir, "-n", "--configfile", str(configfile))
    counts = job_counts(preview.stdout)
    assert counts["evaluate_batch"] == len(NOISE) * 3 * (ROUND // 2) and counts["decide_round"] >= 1

    supervisor, _ = workers.start("adaptive", gpus="0,1", allow=[workdir, REPO])
    arguments = [*LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url]
    run_snakemake(workdir, *arguments, "--labtasker-queue", queue, timeout=600)
    root = workdir / "results" / "t"
    rounds = root / "comparison" / "standin" / "rounds"
    decisions = {path.name: path.read_text() for path in sorted(rounds.glob("round-*.json"))}
    assert sorted(decisions) == ["round-0.json", "round-1.json"]
    first = json.loads(decisions["round-0.json"])
    assert first["continuing"] == list(GOOD) and sorted(first["dropped"]) == sorted(BAD)
    assert all(first["dropped"][name]["e_value"] >= first["dropped"][name]["threshold"] for name in BAD)

    # what each policy evaluated: the worse ones their first round, the good ones everything
    for name in BAD:
        assert len(batch_files(root, name)) == 3 * ROUND // 2
        suites = pd.read_csv(root / name / "standin" / "suite_summary.csv")
        assert set(suites["status"]) == {"partial"} and suites["episodes"].iloc[-1] == 3 * ROUND
    for name in GOOD:
        assert len(batch_files(root, name)) == 3 * EPISODES // 2
        assert set(pd.read_csv(root / name / "standin" / "suite_summary.csv")["status"]) == {"complete"}

    comparison = pd.read_csv(root / "comparison" / "standin" / "policy_comparison.csv", keep_default_na=False)
    status = comparison.drop_duplicates("policy").set_index("policy")["adaptive"].to_dict()
    assert status == {**dict.fromkeys(GOOD, "evaluated in full"), **dict.fromkeys(BAD, "dropped after round 0")}
    markdown = (root / "comparison" / "standin" / "policy_comparison.md").read_text()
    assert "## Adaptive rounds" in markdown and "partial: no final score" in markdown

    # the same command again: no task, no batch, the same decisions byte for byte
    tasks_before = len(all_tasks(client))
    run_snakemake(workdir, *arguments, "--labtasker-queue", queue, timeout=300)
    assert len(all_tasks(client)) == tasks_before
    assert {path.name: path.read_text() for path in sorted(rounds.glob("round-*.json"))} == decisions
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
