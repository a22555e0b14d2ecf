"""A partial real LIBERO run through Snakemake (local profile), its simulator in the LIBERO interpreter
(benchmarks.libero.python), summarises per task and per suite."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import REPO, run_snakemake, write_config
from libero_interpreter import CONFIGURED, SKIP_WITHOUT_LIBERO

from evalwf.report.status import main as status_main

pytestmark = [pytest.mark.libero, pytest.mark.slow, SKIP_WITHOUT_LIBERO]


def test_partial_real_run_summarises_per_task_and_suite(tmp_path, capsys):
    config = {
        "run": "libero-mini",
        "policy": {"name": "standin-policy", "command": "{python} -m benchmarks.standin.policy_server --port {port}",
                   "startup_timeout_s": 60},
        "benchmarks": {"libero": {"suites": {"libero_spatial": [0], "libero_goal": [0]}, "episodes_per_task": 2,
                                  "batch_size": 1, "max_steps": 3, "python": CONFIGURED}},
    }  # fmt: skip
    configfile = write_config(tmp_path / "libero.yaml", config)
    common = ("--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile))
    run_dir = tmp_path / "results" / "libero-mini"
    # Part of the campaign first: the first trial of every task; the status says partial.
    first_trials = [
        f"results/libero-mini/libero/batches/{suite}/0/0000-1.json" for suite in ("libero_spatial", "libero_goal")
    ]
    run_snakemake(tmp_path, "results/libero-mini/campaign.yaml", *first_trials, *common)  # targets before --configfile
    assert status_main([str(run_dir), "--workdir", str(tmp_path)]) == 1, "incomplete: exit status 1"
    out = capsys.readouterr().out
    assert "2/4 batches done" in out and "PARTIAL" in out
    # Then the rest: only the missing batches run, and the gather writes task and suite summaries.
    run_snakemake(tmp_path, *common)
    tasks = pd.read_csv(run_dir / "libero" / "task_summary.csv")
    assert list(tasks.suite) == ["libero_spatial", "libero_goal"] and (tasks.episodes == 2).all()
    assert (tasks.status == "complete").all()
    # the task's language instruction from the sealed manifest (LIBERO's task 0 of each suite)
    assert tasks.instruction.str.startswith(("pick up", "open")).all(), list(tasks.instruction)
    assert "| libero_spatial | 0 | pick up the black bowl" in (run_dir / "libero" / "summary.md").read_text()
    # every batch ran in the LIBERO interpreter the config names, not in the workflow's
    pythons = {json.loads(p.read_text())["worker"]["python"] for p in (run_dir / "libero" / "batches").rglob("*.json")}
    assert pythons == {str(REPO / CONFIGURED)}
    suites = pd.read_csv(run_dir / "libero" / "suite_summary.csv")
    assert list(suites.suite) == ["libero_spatial", "libero_goal", "average"]
    assert suites.episodes.iloc[:2].sum() == 4
