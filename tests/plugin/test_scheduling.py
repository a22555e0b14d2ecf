"""Longest expected work first: each batch task's priority is its expected seconds of simulation (the same figure
as `evalwf plan`, computed here the same way), manifests come before batches, and `fifo` keeps submission order
(real server and snakemake)."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import SNAKEFILE, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, LOCAL_PROFILE, all_tasks, client, labtasker_url, queue, wait_for

from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.plan.cost import CostModel, expected_batch_cost
from snakemake_executor_plugin_labtasker.scheduling import UNBLOCKING_PRIORITY, task_priority

# 0.1 s per emulated step: a batch's cost is whole seconds apart per episode (no worker runs them here)
EMULATED = {"step_time_s": {"default": 0.1}}


def job(cost: int | None, round_index: int = 0) -> SimpleNamespace:
    resources = {"gpu": 1} if cost is None else {"gpu": 1, "expected_cost_s": cost, "adaptive_round": round_index}
    return SimpleNamespace(is_group=lambda: False, resources=resources)


def test_priority_from_expected_cost():
    assert task_priority(job(40), "longest-first") == 40
    assert task_priority(job(40), "longest-first", base=5) == 45
    assert task_priority(job(None), "longest-first") == UNBLOCKING_PRIORITY, "manifests unblock batches: first"
    assert task_priority(job(40), "fifo", base=3) == 3
    group = SimpleNamespace(is_group=lambda: True, jobs=[job(10), job(30)])
    assert task_priority(group, "longest-first") == 40
    with pytest.raises(ValueError, match="fifo"):
        task_priority(job(1), "shortest-first")
    # an adaptive sweep: the round a decision waits for before the longer batches of the rounds run ahead of it
    assert task_priority(job(30, 1), "longest-first") > task_priority(job(10**6, 2), "longest-first")
    assert task_priority(job(10**6, 2), "longest-first") > task_priority(job(30, 3), "longest-first")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["longest-first", "fifo"])
def test_submitted_batches_carry_their_expected_cost(labtasker_url, queue, client, tmp_path, mode):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    section = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 5, "max_steps": 30, **EMULATED}
    config = standin_config(workdir, standin=section)
    configfile = write_config(workdir / "campaign.yaml", config)
    run_snakemake(workdir, *LOCAL_PROFILE, "--configfile", str(configfile), "--until", "plan_manifest")
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url,
        "--labtasker-queue", queue, "--labtasker-scheduling", mode,
    ]  # fmt: skip
    submitter = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tasks = wait_for(lambda: len(all_tasks(client)) == 3 and all_tasks(client), 120, "3 batch tasks")
    finally:
        submitter.send_signal(signal.SIGINT)
        submitter.wait(60)
    priorities = {t.name.rsplit("batch=", 1)[1].rstrip("]"): t.priority for t in tasks}
    # the figure `evalwf plan` prices each batch at (nothing measured yet: the emulated step time)
    member = Campaign(validate_config(config)).single()
    model = CostModel.measure(member)
    planned = {b.episodes.label: max(1, round(expected_batch_cost(model, b))) for b in member.batches()}
    expected = planned if mode == "longest-first" else dict.fromkeys(priorities, 0)
    assert priorities == expected
    if mode == "longest-first":  # batches of 2, 2 and 1 episodes: the shorter one last
        assert priorities["0000-2"] == priorities["0002-2"] > priorities["0004-1"] > 0
