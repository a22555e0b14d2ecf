"""A real Snakemake run with the local profile: CSV totals, corrupt batch detection, rerun of only what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, job_counts, run_snakemake, standin_config, write_config

PROFILE = ["--profile", str(REPO / "profiles" / "local")]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    # two suites of a task each (the average over suites), two batches per task, the second one short
    section = {"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 3}
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir, standin=section))
    run_snakemake(workdir, *PROFILE, "--configfile", str(configfile))
    return workdir, configfile


def batch_files(workdir: Path) -> list[Path]:
    return sorted((workdir / "results" / "t" / "standin" / "batches").rglob("*.json"))


def test_csv_totals_equal_sum_over_batch_files(finished_run):
    workdir, _ = finished_run
    batches = [json.loads(p.read_text()) for p in batch_files(workdir)]
    assert len(batches) == 4  # 2 tasks x ceil(3 / 2)
    tasks = pd.read_csv(workdir / "results" / "t" / "standin" / "task_summary.csv")
    suites = pd.read_csv(workdir / "results" / "t" / "standin" / "suite_summary.csv")
    for row in tasks.itertuples():
        mine = [b for b in batches if (b["suite"], b["task"]) == (row.suite, row.task)]
        assert row.successes == sum(b["success_count"] for b in mine)
        assert row.episodes == sum(b["num_episodes"] for b in mine) == 3
        assert row.status == "complete"
    per_suite = suites[suites.suite != "average"]
    assert per_suite.successes.sum() == sum(b["success_count"] for b in batches)
    assert per_suite.episodes.sum() == 6
    average = suites[suites.suite == "average"].iloc[0]
    assert average.success_rate == pytest.approx(per_suite.success_rate.mean(), abs=1e-4)


def test_rerun_does_nothing(finished_run):
    workdir, configfile = finished_run
    completed = run_snakemake(workdir, *PROFILE, "--configfile", str(configfile), "-n")
    assert "Nothing to be done" in completed.stdout + completed.stderr


def test_corrupt_batch_is_named_then_only_it_is_recomputed(finished_run):
    workdir, configfile = finished_run
    victim = batch_files(workdir)[2]
    data = json.loads(victim.read_text())
    data["success_count"] += 1
    victim.write_text(json.dumps(data))
    failed = run_snakemake(workdir, *PROFILE, "--configfile", str(configfile), check=False)
    assert failed.returncode != 0
    log = failed.stdout + failed.stderr
    assert str(victim.relative_to(workdir)) in log and "success_count" in log
    assert not (workdir / "results" / "t" / "standin" / "task_summary.csv").exists()

    victim.unlink()
    preview = job_counts(run_snakemake(workdir, *PROFILE, "--configfile", str(configfile), "-n").stdout)
    assert preview == {"evaluate_batch": 1, "summarize_standin": 1, "report_landing": 1, "all": 1, "total": 4}
    others = {p: p.stat().st_mtime_ns for p in batch_files(workdir)}
    run_snakemake(workdir, *PROFILE, "--configfile", str(configfile))
    assert victim.exists()
    assert all(p.stat().st_mtime_ns == mtime for p, mtime in others.items()), "finished batches are not redone"
    assert json.loads(victim.read_text())["success_count"] == data["success_count"] - 1
