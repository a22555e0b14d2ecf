"""The status command on a run with done, pending, running and failed batches (real Labtasker server)."""

# ruff: noqa: F401, F811  (pytest fixtures imported from the executor test kit are used as parameters)
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
from conftest import standin_config
from labtasker_testkit import client, labtasker_url, queue
from runkit import fabricate_run

from evalwf.contract import campaign_key
from evalwf.report import run_state, status
from evalwf.rules.jobs import record_campaign
from snakemake_executor_plugin_labtasker.task_identity import short_id


def submit(client, workdir, batch_path, name):
    """A task shaped like the executor's (metadata.campaign + args.outputs), without a Snakemake behind it."""
    output = os.path.normpath(os.path.join(workdir, batch_path))
    return client.submit_task(
        {"kind": "snakemake-job-step", "outputs": [output]},
        name=name,
        metadata={"campaign": campaign_key(str(workdir))},
        max_attempts=1,
        routes=["default"],
        task_id=short_id(output),
    )


def test_status_tables_show_done_pending_running_failed(tmp_path, labtasker_url, queue, client, capsys):
    """The run's files are made to order (runkit: sealed manifests, validated batch files), the queue is a real
    server: what status reads from both is what is shown, whichever way the batch files came to be."""
    section = {"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 6, "batch_size": 2}
    # reach: batch 0 done, batch 1 running, batch 2 failed; open: batches 0-1 done, batch 2 pending.
    missing = {"reach/0002-2", "reach/0004-2", "open/0004-2"}
    campaign = fabricate_run(tmp_path, lambda suite, task, index: index % 3 != 1, skip=missing, standin=section)
    record_campaign(campaign.config, str(tmp_path / "results" / "t" / "campaign.yaml"))
    paths = {plan.ref.task: [Path(batch.path) for batch in plan.batches] for plan in campaign.tasks}
    reach, opened = paths["reach"], paths["open"]
    assert [p.exists() for p in reach + opened] == [True, False, False, True, True, False]
    submit(client, tmp_path, reach[1], "running")
    submit(client, tmp_path, reach[2], "failed")
    submit(client, tmp_path, opened[2], "pending")
    claimed = {}
    for _ in range(2):
        claim = client._claim(route="default", run_id=f"r_test{len(claimed):08d}")
        claimed[claim.task.name] = claim
    assert set(claimed) == {"running", "failed"}, "claims are FIFO: the pending task stays pending"
    failed = claimed["failed"]
    client._fail(
        task_id=failed.task.id, run_id=failed.run_id, error_type="JobStepFailed", message="boom", traceback=None
    )

    csv_dir = tmp_path / "status"
    run_dir = str(tmp_path / "results" / "t")
    args = [run_dir, "--workdir", str(tmp_path), "--url", labtasker_url, "--queue", queue, "--csv", str(csv_dir)]
    capsys.readouterr()
    assert status.main(args) == run_state.EXIT_FAILED, "a failed batch makes the exit status 2"
    printed = capsys.readouterr()
    assert "[labtasker]" not in printed.err + printed.out, "no client chatter"
    assert "3/6 batches done, 1 FAILED - PARTIAL numbers" in printed.out
    failed_task = short_id(os.path.normpath(os.path.join(tmp_path, reach[2])))
    assert "alpha/reach 0004-2: failed: JobStepFailed: boom" in printed.out
    assert f"log: {tmp_path}/results/t/standin/logs/batches/alpha/reach/0004-2.log" in printed.out
    assert f"{tmp_path}/.snakemake/labtasker/tasks/{failed_task}/" in printed.out
    tasks = pd.read_csv(csv_dir / "status_tasks.csv").set_index("task")
    assert tasks.loc["reach", "done/total"] == "1/3"
    assert (tasks.loc["reach", "running"], tasks.loc["reach", "failed"], tasks.loc["reach", "pending"]) == (1, 1, 0)
    assert tasks.loc["open", "done/total"] == "2/3"
    assert (tasks.loc["open", "running"], tasks.loc["open", "failed"], tasks.loc["open", "pending"]) == (0, 0, 1)
    done_records = [json.loads(p.read_text()) for p in (reach[0], opened[0], opened[1])]
    reach_result = done_records[0]
    assert tasks.loc["reach", "success/trials"] == f"{reach_result['success_count']}/2"
    assert set(tasks["status"]) == {"partial"}
    suites = pd.read_csv(csv_dir / "status_suites.csv").set_index("suite")
    open_successes = done_records[1]["success_count"] + done_records[2]["success_count"]
    assert suites.loc["beta", "success/trials"] == f"{open_successes}/4"
    reach_rate, open_rate = reach_result["success_count"] / 2, open_successes / 4
    assert suites.loc["average", "success_%"] == round(100 * (reach_rate + open_rate) / 2, 1)
    assert suites.loc["average", "done/total"] == "3/6"
    assert (suites.loc["average", "running"], suites.loc["average", "failed"]) == (1, 1)


def test_status_without_queue_reads_result_files(tmp_path, capsys):
    config = standin_config(tmp_path, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 1})
    run_dir = tmp_path / "results" / "t"
    run_dir.mkdir(parents=True)
    record_campaign(config, str(run_dir / "campaign.yaml"))
    assert status.main([str(run_dir), "--workdir", str(tmp_path)]) == run_state.EXIT_INCOMPLETE
    out = capsys.readouterr().out
    assert "0/2 batches done" in out and "PARTIAL" in out and "not known" in out
