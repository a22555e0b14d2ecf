"""A policy that never starts costs at most N server starts in the whole campaign (invariant 11): one real sweep of
four policies (a healthy stand-in, one whose server crashes after loading, one that hangs past its
startup_timeout_s, one that starts but answers actions of the wrong shape) through profiles/labtasker (--retries 2,
keep-going) on a real Labtasker server with two real workers. Every launch of a broken server is counted in its
own launch log. The healthy policy completes; each server that never starts is started exactly N times, the
wrong-shaped policy is stopped after its first N batches failed alike, their other batches fail without a start,
and the submitter prints one message per policy naming it, the reason and the log. A second submission of the same
command tries the broken policies again (said first), with --labtasker-policy-breaker 1: exactly one more start
each."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import signal
import socket
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, all_tasks, client, labtasker_url, queue, workers

pytestmark = pytest.mark.slow

SERVER = "{python} -m benchmarks.standin.policy_server --port {port}"
STOPPED = "is stopped for this submission (circuit breaker"


def launches(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.startswith("start ")) if path.exists() else 0


def sweep(workdir: Path) -> Path:
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 4, "batch_size": 1})
    del config["policy"]
    config["policies"] = [
        {"name": "healthy", "command": f"{SERVER} --noise 0.3", "startup_timeout_s": 60},
        {
            "name": "crashes",
            "command": f"{SERVER} --load-time-s 0.5 --fail-start --launch-log {workdir / 'crashes.launches'}",
            "startup_timeout_s": 60,
        },
        {
            "name": "hangs",
            "command": f"{SERVER} --load-time-s 600 --launch-log {workdir / 'hangs.launches'}",
            "startup_timeout_s": 4,
        },
        # starts, but answers 1-D actions: every episode fails alike
        {"name": "wrong-shapes", "command": f"{SERVER} --action-dim 1", "startup_timeout_s": 60},
    ]
    config["baseline"] = "healthy"
    return write_config(workdir / "sweep.yaml", config)


def test_a_never_starting_policy_costs_n_starts_and_the_sweep_goes_on(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = sweep(workdir)
    supervisor, _ = workers.start("pair", gpus="0,1", allow=[workdir, REPO])
    submit = [*LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url]
    submit += ["--labtasker-queue", queue]

    first = run_snakemake(workdir, *submit, check=False, timeout=400)
    output = first.stdout + first.stderr
    assert first.returncode != 0, "the broken policies' batches failed"
    assert launches(workdir / "crashes.launches") == 2, "N = 2 failed starts in the whole campaign, two workers"
    assert launches(workdir / "hangs.launches") == 2
    healthy = pd.read_csv(workdir / "results" / "t" / "healthy" / "standin" / "task_summary.csv")
    assert healthy["episodes"].sum() == 4, "the healthy policy of the sweep completed"

    # one message per broken policy: the policy, the reason, its log and the host it is on
    messages = {line.split("policy ")[1].split("@")[0]: line for line in output.splitlines() if STOPPED in line}
    assert sorted(messages) == ["crashes", "hangs", "wrong-shapes"], "\n".join(messages.values()) or output[-6000:]
    assert "failed to start 2 time(s)" in messages["crashes"]
    assert "exited with status 3 during startup" in messages["crashes"]
    assert "not ready after 4s (policy.startup_timeout_s)" in messages["hangs"]
    assert (
        "first 2 batches all failed for the same reason: ValueError: stand-in simulator needs actions of at "
        in (messages["wrong-shapes"])
    )
    for name, line in messages.items():
        host, _, path = line.rsplit("; log ", 1)[1].rstrip(".").partition(":")
        assert host == socket.gethostname() and Path(path).is_file(), line
        assert ("policy-server-" if name != "wrong-shapes" else "/.snakemake/labtasker/tasks/") in path, line
    assert "cannot load weights (--fail-start)" in output, "the message shows the end of the server's log"
    # only the failures before a breaker opened get an error block: at most N failed starts; for the batch rule the
    # first N distinct batches (each tried up to 3 times by --retries: a retry is the same batch) and the batches
    # already running on the two workers
    blocks = [block.split("external_jobid:")[0] for block in output.split("Error in rule evaluate_batch")[1:]]
    printed = {name: sum(f"/t/{name}/standin/" in block for block in blocks) for name in messages}
    assert printed["crashes"] <= 2 and printed["hangs"] <= 2 and printed["wrong-shapes"] <= 2 * 3 + 2, printed
    assert sum(printed.values()) == len(blocks), "every error block is one of theirs: the healthy policy's succeed"

    ours = [t for t in all_tasks(client) if t.name.startswith("evaluate_batch")]
    broken = [t for t in ours if "policy=healthy" not in t.name]
    assert len(broken) == 12 and all(t.status in ("failed", "cancelled") for t in broken)
    wrong_batches = workdir / "results" / "t" / "wrong-shapes" / "standin" / "batches" / "alpha" / "reach"
    assert not list(wrong_batches.glob("*.json")), "no batch result of the wrong-shapes policy"
    assert list(wrong_batches.glob(".failed/*")), "its failures' causes are kept beside the results"
    for task in broken:
        if task.status == "cancelled":
            assert task.result["stopped_by"] == "policy circuit breaker", task.result
        elif "policy=wrong-shapes" not in task.name:
            assert task.last_error.type in ("PolicyServerError", "PolicyCircuitOpen"), task.last_error

    # the same command again (after a fix, or not): said first, then tried again with N = 1 this time
    second = run_snakemake(workdir, *submit, "--labtasker-policy-breaker", "1", check=False, timeout=300)
    again = second.stdout + second.stderr
    assert again.count("the previous submission in this directory stopped policy") == 3, again[-6000:]
    assert launches(workdir / "crashes.launches") == 3 and launches(workdir / "hangs.launches") == 3
    assert sum(STOPPED in line and "failed to start 1 time(s)" in line for line in again.splitlines()) == 2
    # with N = 1 every failure opens its policy's breaker or follows it: Snakemake is never told to retry one
    assert "Trying to restart job" not in again, again[-6000:]

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
