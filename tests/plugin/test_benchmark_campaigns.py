"""Benchmark adapters through the Labtasker profile: the RoboTwin adapter against the stand-in checkout."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import pandas as pd
import pytest
import yaml
from conftest import run_snakemake, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, all_tasks, client, labtasker_url, queue, workers

pytestmark = pytest.mark.slow


def test_robotwin_standin_campaign_through_labtasker(labtasker_url, queue, client, workers, tmp_path):
    config = yaml.safe_load((REPO / "config" / "robotwin-standin.yaml").read_text())
    config["benchmarks"]["robotwin"].update(tasks=["click_bell"], task_configs=["demo_clean"], episodes_per_task=4)
    configfile = write_config(tmp_path / "robotwin.yaml", config)
    workers.start("pair", gpus="0,1", allow=[tmp_path, REPO])
    run_snakemake(
        tmp_path, *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url,
        "--labtasker-queue", queue,
    )  # fmt: skip
    root = tmp_path / "results" / "robotwin-standin" / "robotwin"
    tasks = pd.read_csv(root / "task_summary.csv")
    assert set(zip(tasks.task_config, tasks.instruction_type, strict=True)) == {
        ("demo_clean", "seen"),
        ("demo_clean", "unseen"),
    }
    assert (tasks.episodes == 4).all() and (tasks.status == "complete").all()
    benchmark = pd.read_csv(root / "benchmark_summary.csv")
    per_setting = benchmark[benchmark.task_config != "average"]
    assert per_setting.episodes.sum() == 8
    assert per_setting.successes.sum() == tasks.successes.sum()
    # 1 manifest (seen and unseen share it) + 2 settings x 2 batches, each exactly one task
    assert len(all_tasks(client)) == 5
