"""The session's finished local-profile run (conftest.finished_standin_run): CSV totals equal the sum over batch
files, and a rerun has nothing to do. (A corrupt batch named, then only it recomputed:
tests/plugin/test_campaign_faults.py::test_untrusted_batch_json_is_named_never_summarised_and_rerun_after_deleting.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, FinishedRun, run_snakemake

PROFILE = ["--profile", str(REPO / "profiles" / "local")]


def batch_files(run: FinishedRun) -> list[Path]:
    return sorted((run.benchmark_dir / "batches").rglob("*.json"))


def test_csv_totals_equal_sum_over_batch_files(finished_standin_run):
    run = finished_standin_run
    section = run.config["benchmarks"]["standin"]
    tasks_planned = sum(len(tasks) for tasks in section["suites"].values())
    episodes = section["episodes_per_task"]
    batches = [json.loads(p.read_text()) for p in batch_files(run)]
    # two suites (the average over suites), two batches per task, the second one short
    assert len(section["suites"]) == 2 and episodes % section["batch_size"] != 0
    assert len(batches) == tasks_planned * math.ceil(episodes / section["batch_size"])
    tasks = pd.read_csv(run.benchmark_dir / "task_summary.csv")
    suites = pd.read_csv(run.benchmark_dir / "suite_summary.csv")
    assert len(tasks) == tasks_planned
    for row in tasks.itertuples():
        mine = [b for b in batches if (b["suite"], b["task"]) == (row.suite, row.task)]
        assert row.successes == sum(b["success_count"] for b in mine)
        assert row.episodes == sum(b["num_episodes"] for b in mine) == episodes
        assert row.status == "complete"
    per_suite = suites[suites.suite != "average"]
    assert per_suite.successes.sum() == sum(b["success_count"] for b in batches)
    assert per_suite.episodes.sum() == tasks_planned * episodes
    average = suites[suites.suite == "average"].iloc[0]
    assert average.success_rate == pytest.approx(per_suite.success_rate.mean(), abs=1e-4)


def test_rerun_does_nothing(finished_standin_run):
    run = finished_standin_run
    completed = run_snakemake(run.workdir, *PROFILE, "--configfile", str(run.configfile), "-n")
    assert "Nothing to be done" in completed.stdout + completed.stderr
