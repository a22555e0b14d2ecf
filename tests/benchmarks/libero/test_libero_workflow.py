"""A partial real LIBERO run through Snakemake (local profile), its simulator in the LIBERO interpreter
(benchmarks.libero.python), summarises per task and per suite."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from conftest import REPO, run_snakemake, write_config
from libero_interpreter import CONFIGURED, SKIP_WITHOUT_LIBERO

from evalwf.report.status import main as status_main

pytestmark = [pytest.mark.libero, pytest.mark.slow, SKIP_WITHOUT_LIBERO]


def test_partial_real_run_summarises_per_task_and_suite(tmp_path, capsys):
    """Also what a job step's episodes look like from the real path: every trial through the stand-in policy server
    (a separate process, over the openpi websocket) with the workflow's client, its record complete; and, on a
    machine without a GPU driver, the worker's GPU id in CUDA_VISIBLE_DEVICES (3: no such EGL device here) is only
    a label: LIBERO still renders on the CPU and the records keep the label.

    One trial per task (a LIBERO trial is a reset and 13 steps, about 6 CPU s, and each task's manifest resets once per
    trial): two tasks in two suites are what per task, per suite and partial need; several trials in one batch, and
    the manifest's RNG states across them, are checked on the simulator itself (test_libero_sim.py)."""
    gpu_label = {} if os.path.exists("/proc/driver/nvidia") else {"CUDA_VISIBLE_DEVICES": "3"}
    config = {
        "run": "libero-mini",
        "policy": {"name": "standin-policy", "command": "{python} -m benchmarks.standin.policy_server --port {port}",
                   "startup_timeout_s": 60},
        "benchmarks": {"libero": {"suites": {"libero_spatial": [0], "libero_goal": [0]}, "episodes_per_task": 1,
                                  "batch_size": 1, "max_steps": 3, "python": CONFIGURED}},
    }  # fmt: skip
    configfile = write_config(tmp_path / "libero.yaml", config)
    common = ("--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile))
    run_dir = tmp_path / "results" / "libero-mini"
    # Part of the campaign first: the first task's batch; the status says partial.
    first_task = "results/libero-mini/libero/batches/libero_spatial/0/0000-1.json"
    targets = ("results/libero-mini/campaign.yaml", first_task)  # targets before --configfile
    run_snakemake(tmp_path, *targets, *common, env=gpu_label)
    assert status_main([str(run_dir), "--workdir", str(tmp_path)]) == 1, "incomplete: exit status 1"
    out = capsys.readouterr().out
    assert "1/2 batches done" in out and "PARTIAL" in out
    # Then the rest: only the missing batches run, and the gather writes task and suite summaries.
    finished = (tmp_path / first_task).stat().st_mtime_ns
    run_snakemake(tmp_path, *common, env=gpu_label)
    assert (tmp_path / first_task).stat().st_mtime_ns == finished, "the finished batch is not evaluated again"
    tasks = pd.read_csv(run_dir / "libero" / "task_summary.csv")
    assert list(tasks.suite) == ["libero_spatial", "libero_goal"] and (tasks.episodes == 1).all()
    assert (tasks.status == "complete").all()
    # the task's language instruction from the sealed manifest (LIBERO's task 0 of each suite)
    assert tasks.instruction.str.startswith(("pick up", "open")).all(), list(tasks.instruction)
    assert "| libero_spatial | 0 | pick up the black bowl" in (run_dir / "libero" / "summary.md").read_text()
    # every batch ran in the LIBERO interpreter the config names, not in the workflow's
    batches = [json.loads(p.read_text()) for p in sorted((run_dir / "libero" / "batches").rglob("*.json"))]
    assert {batch["worker"]["python"] for batch in batches} == {str(REPO / CONFIGURED)}
    if gpu_label:
        assert {batch["worker"]["gpu"] for batch in batches} == {"3"}
    assert [record["index"] for batch in batches for record in batch["episodes"]] == [0, 0]
    for record, batch_s in [(record, batch["duration_s"]) for batch in batches for record in batch["episodes"]]:
        assert record["setup"] == {"init_state_index": record["index"]} and record["seed"] == 7
        assert record["error"] is None and isinstance(record["success"], bool)
        assert record["steps"] == 3 or record["success"]
        assert record["extra"]["max_steps"] == 3 and record["extra"]["max_steps_override"] is True
        assert len(record["extra"]["first_frame_sha256"]) == 64 and 0 < record["duration_s"] <= batch_s
    suites = pd.read_csv(run_dir / "libero" / "suite_summary.csv")
    assert list(suites.suite) == ["libero_spatial", "libero_goal", "average"]
    assert suites.episodes.iloc[:2].sum() == 2
    # every batch records the environment it ran in: the packages its manifest records, in the LIBERO interpreter,
    # and what OpenGL says renders the cameras (llvmpipe without a GPU)
    manifest = json.loads(next((run_dir / "libero" / "manifests").rglob("*.json")).read_text())
    for environment in (batch["environment"] for batch in batches):
        assert environment["packages"] == manifest["definition"]["environment"]["packages"]
        assert environment["python"] == manifest["definition"]["environment"]["python"]
        assert environment["renderer"].split(" (OpenGL ")[1].endswith(", MUJOCO_GL=egl)"), environment["renderer"]
        if gpu_label:
            assert environment["renderer"].startswith("llvmpipe") and environment["gpu_model"] is None
    assert "environment: every batch ran under one: python " in (run_dir / "libero" / "summary.md").read_text()
