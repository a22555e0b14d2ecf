"""A worker whose node cannot run a benchmark refuses its jobs (evalwf/worker/node_gate.py): it runs the node
checks once, hands every such task back uncharged without starting a job step, names the refusal on the queue (its
registration), and the submitter warns with the reason and names it in its progress line; a worker whose node passes
takes the same tasks and the campaign completes. Real Labtasker server, workers and snakemake."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SNAKEFILE, missing_facts, standin_config, write_config
from labtasker_testkit import (
    LABTASKER_PROFILE,
    REPO,
    all_tasks,
    client,
    labtasker_url,
    queue,
    status_of,
    wait_for,
    workers,
)

from evalwf.common.commands import evalwf_command
from evalwf.contract import WORKER_REFUSING_KEY, campaign_key
from evalwf.job.node_probe import check_benchmark
from evalwf.worker import queue_client
from evalwf.worker.node_gate import NodeGate, task_benchmarks
from snakemake_executor_plugin_labtasker.worker_refusals import WorkerRefusals

BROKEN_PYTHON = "#!/bin/sh\necho 'ModuleNotFoundError: No module named numpy' >&2\nexit 1\n"


def broken_python(where: Path) -> Path:
    path = where / "broken-python"
    path.write_text(BROKEN_PYTHON)
    path.chmod(0o755)
    return path


def test_task_benchmarks_are_read_from_the_benchmark_wildcard_of_the_target_jobs():
    target_jobs = [
        "evaluate_batch:run=t,benchmark=standin,suite=alpha,task=reach,batch=0-2",
        "plan_manifest:run=t,benchmark=robotwin,scope=demo_clean,task=click_bell,digest=ab12",
        "evaluate_batch:run=t,benchmark=standin,suite=beta,task=open,batch=2-2",
    ]
    assert task_benchmarks(target_jobs) == ["standin", "robotwin"]
    assert task_benchmarks(["summarize_standin:", "record_campaign:run=t"]) == []
    assert task_benchmarks(["evaluate_batch:benchmark=nosuch,suite=a"]) == []


def test_the_gate_checks_once_per_config_and_benchmark_and_again_when_the_config_changes(tmp_path):
    calls: list[str] = []
    published: list[dict] = []

    def counting(benchmark, section, gpu):
        calls.append(benchmark)
        return check_benchmark(benchmark, section, gpu)

    logged: list[str] = []
    gate = NodeGate("0", logged.append, published.append, check=counting)
    config = write_config(
        tmp_path / "c.yaml", standin_config(tmp_path, standin={"python": str(broken_python(tmp_path))})
    )
    target_jobs = ["evaluate_batch:benchmark=standin,suite=alpha,task=reach,batch=0-2"]
    reasons: list[str | None] = []
    threads = [
        threading.Thread(target=lambda: reasons.append(gate.refusal(target_jobs, [str(config)], "c_x")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert calls == ["standin"], "three slots asking together: one run"
    assert len(reasons) == 3 and all(
        r and r.startswith("standin cannot run on this node: light core: ") for r in reasons
    )
    assert "fix: that environment needs Python >= 3.10" in reasons[0]
    assert published == [{"c_x": {"standin": reasons[0].split(": ", 1)[1]}}]
    assert any("node checks for standin FAILED" in line for line in logged)
    assert gate.refusal(["summarize_standin:"], [str(config)], "c_x") is None  # no simulator

    # the config now names a working interpreter: checked again, passes, and the refusal is withdrawn
    time.sleep(0.01)
    write_config(config, standin_config(tmp_path))
    assert gate.refusal(target_jobs, [str(config)], "c_x") is None
    assert calls == ["standin", "standin"] and published[-1] == {}


def test_a_benchmark_file_checked_at_start_serves_every_campaign_composed_with_it(tmp_path):
    """worker --configfile config/<benchmark>.yaml: the verdict is kept per benchmark section, so the tasks of a
    campaign composed of that file and a policy file are judged without running the checks again."""
    calls: list[str] = []

    def counting(benchmark, section, gpu):
        calls.append(benchmark)
        return check_benchmark(benchmark, section, gpu)

    full = standin_config(tmp_path, standin={"python": str(broken_python(tmp_path))})
    benchmark_file = write_config(tmp_path / "standin.yaml", {"benchmarks": full["benchmarks"]})
    policy_file = write_config(tmp_path / "policy.yaml", {k: v for k, v in full.items() if k != "benchmarks"})
    gate = NodeGate("0", lambda _: None, lambda _: None, check=counting)
    gate.check_configs([str(benchmark_file)], "c_x")
    assert calls == ["standin"]
    target_jobs = ["plan_manifest:run=t,benchmark=standin,scope=alpha,task=reach,digest=ab"]
    assert gate.refusal(target_jobs, [str(benchmark_file), str(policy_file)], "c_x") is not None
    assert calls == ["standin"], "the same section: the verdict from the start is reused"


def test_a_registration_names_its_refusals_and_the_submitter_reads_them(labtasker_url, queue, client):
    refusals = WorkerRefusals("c_mine", "default", poll_s=0.0)
    registration = queue_client.WorkerRegistration(client, route="default", metadata={"worker": "w1", "host": "h"})
    with registration:
        wait_for(lambda: client.count_workers() == 1, 30, "the registration")
        assert refusals.poll(client) == [] and refusals.note() == ""
        first_id = registration.id
        reason = "renderer: SAPIEN cannot render (fix: install the Vulkan ICD)"
        registration.update({"c_mine": {"robotwin": reason}, "c_other": {"libero": "x"}})
        assert registration.id != first_id
        warnings = wait_for(lambda: refusals.poll(client), 30, "the refusal on the queue")
        assert len(warnings) == 1, warnings
        # who refuses what, why, that nothing is charged, and the command that checks a node
        doctor = evalwf_command("doctor", "--configfile", "<your config>", "--gpus", "<id>")
        facts = ("[labtasker]", "worker w1 on h", "robotwin tasks", "node checks failed", "uncharged", reason, doctor)
        assert not missing_facts(warnings[0], *facts), warnings[0]
        assert refusals.poll(client) == [], "said once"
        assert not missing_facts(refusals.note(), "1 worker(s) refuse robotwin", "node checks failed"), refusals.note()
        assert client.count_workers() == 1, "the new registration replaced the old one"
    wait_for(lambda: client.count_workers() == 0, 30, "the registration withdrawn")


def submit(workdir: Path, configfile: Path, url: str, queue: str, log: Path, env: dict[str, str]) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", url, "--labtasker-queue", queue,
        "--labtasker-no-worker-warning-s", "3",
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})


@pytest.mark.slow
def test_a_worker_whose_checks_fail_claims_nothing_and_the_submitter_says_why(
    labtasker_url, queue, client, workers, tmp_path
):
    """The campaign's stand-in interpreter is `$STANDIN_PYTHON`, resolved on each node: broken on worker A's, the
    workflow's own on worker B's. A checks at start (--configfile) and refuses every task (manifest and batches)
    without a job step or a charged attempt (max attempts 1: a charge would fail the task); the submitter names A's
    reason; B runs them all."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    section = {"python": "$STANDIN_PYTHON", "suites": {"alpha": ["reach"]}, "episodes_per_task": 4}
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir, standin=section))
    log = tmp_path / "submit.log"
    submitter = submit(workdir, configfile, labtasker_url, queue, log, {"STANDIN_PYTHON": sys.executable})
    broken = {"STANDIN_PYTHON": str(broken_python(tmp_path))}
    try:
        _, log_a = workers.start("a", allow=[workdir, REPO], env=broken, extra=["--configfile", str(configfile)])
        warning = wait_for(
            lambda: next((line for line in log.read_text().splitlines() if "refuses this campaign's" in line), ""),
            120,
            "the submitter's warning naming the refusal",
        )
        assert (
            "refuses this campaign's standin tasks" in warning
            and f"{broken['STANDIN_PYTHON']} cannot import" in warning
        )
        assert "fix: that environment needs Python >= 3.10" in warning
        wait_for(lambda: (log_a / "worker.out").read_text().count("back uncharged") >= 2, 60, "two hand-backs")
        tasks = all_tasks(client)
        assert tasks and all(t.status == "pending" and t.attempt == 0 for t in tasks), [
            (t.status, t.attempt) for t in tasks
        ]
        assert not (workdir / ".snakemake" / "labtasker" / "tasks").exists(), "no job step was started"
        status_a = json.loads((log_a / "status.json").read_text())
        assert status_a[WORKER_REFUSING_KEY] == {
            campaign_key(str(workdir)): {"standin": warning.split(": ", 1)[1].split(". Check a node")[0]}
        }

        # B also starts the policy server at start, while its slot already claims: the batch waits for that start
        _, log_b = workers.start(
            "b", allow=[workdir, REPO], env={"STANDIN_PYTHON": sys.executable}, extra=["--configfile", str(configfile)]
        )
        assert submitter.wait(300) == 0, log.read_text()[-5000:]
    finally:
        if submitter.poll() is None:
            submitter.kill()
    out_a = (log_a / "worker.out").read_text()
    assert out_a.count("node checks for standin of") == 1, "checked once, at start (--configfile), then cached"
    assert out_a.index("node checks for standin of") < out_a.index("claimed task"), "before the first claim"
    assert "node checks for standin FAILED" in out_a and "light core   FAIL" in out_a
    assert "no policy server started at start: no benchmark of the config files runs here" in out_a
    assert status_of(log_a)["policy_server_state"] == "none"
    out_b = (log_b / "worker.out").read_text()
    assert "at start (--configfile), before the first batch" in out_b
    status_b = status_of(log_b)
    assert status_b["policy_server_loads"] == 1, "started at start and reused: " + out_b[-2000:]
    final_a = json.loads((log_a / "status.json").read_text())["tasks"]
    assert final_a["succeeded"] == final_a["failed"] == 0 and final_a["node_unfit"] >= 2, final_a
    tasks = all_tasks(client)
    assert all(t.status == "succeeded" and t.attempt == 1 for t in tasks), [(t.status, t.attempt) for t in tasks]
    for task_dir in (workdir / ".snakemake" / "labtasker" / "tasks").iterdir():
        assert len(list(task_dir.glob("*.log"))) == 1, "one job step per task: worker B's"
    text = log.read_text()
    assert any("1 worker(s) refuse standin (node checks failed)" in line for line in text.splitlines()), text[-3000:]
