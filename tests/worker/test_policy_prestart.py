"""A worker started with its campaign's config files (--configfile) starts their policy's server before any batch
(evalwf/worker/policy_prestart.py), and starts nothing for config files another user could change, that name no
policy, an external one or several. The campaign run with it (the server reused, not started again) is in
tests/worker/test_node_gate.py."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

from conftest import standin_config, standin_policy, write_config
from labtasker_testkit import REPO, cmdlines, labtasker_url, queue, status_of, wait_for, workers

from evalwf.worker.policy_prestart import policy_to_prestart


def test_the_one_served_policy_of_the_config_files_is_started_and_nothing_else(tmp_path):
    campaign = write_config(tmp_path / "campaign.yaml", standin_config(tmp_path))
    spec, message = policy_to_prestart([str(campaign)])
    assert spec is not None and spec.name == "standin-policy" and "before the first batch" in message

    benchmark_only = write_config(tmp_path / "standin.yaml", {"benchmarks": {"standin": {"suites": {"a": ["reach"]}}}})
    assert policy_to_prestart([str(benchmark_only)]) == (
        None,
        "the config files name no policy: its server starts with the first batch",
    )

    sweep = standin_config(tmp_path, policies=[standin_policy("a"), standin_policy("b", "--noise 2")], baseline="a")
    del sweep["policy"]
    spec, message = policy_to_prestart([str(write_config(tmp_path / "sweep.yaml", sweep))])
    assert spec is None and message.endswith("name 2 policies"), message

    external = standin_config(tmp_path, policy={"name": "remote", "url": "ws://127.0.0.1:9/"})
    spec, message = policy_to_prestart([str(write_config(tmp_path / "external.yaml", external))])
    assert spec is None and message.endswith("name an external server (policy.url)"), message

    broken = tmp_path / "broken.yaml"
    broken.write_text("run: t\npolicy: {name: p}\nbenchmarks: {standin: {episodes_per_task: -1}}\n")
    spec, message = policy_to_prestart([str(broken)])
    assert spec is None and "are not a campaign's" in message, message


def test_config_files_that_another_user_could_change_start_nothing(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    campaign = write_config(shared / "campaign.yaml", standin_config(tmp_path))
    os.chmod(shared, 0o777)
    spec, message = policy_to_prestart([str(campaign)])
    assert spec is None and message.startswith("no policy server started at start: ") and str(shared) in message


def test_a_worker_with_the_campaign_config_has_its_policy_server_ready_before_any_task(
    labtasker_url, queue, workers, tmp_path
):
    """Nothing is queued: the worker checks its node and starts the config's policy server all the same; its status
    file shows the server ready, loaded once, and no task claimed."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    campaign = write_config(workdir / "campaign.yaml", standin_config(workdir))
    _, log_dir = workers.start("w", allow=[workdir, REPO], extra=["--configfile", str(campaign)])

    status = wait_for(
        lambda: (status := status_of(log_dir)).get("policy_server_state") == "ready" and status,
        60,
        "the policy server ready with nothing claimed",
    )
    assert status["policy_identity"].startswith("standin-policy") and status["policy_server_loads"] == 1, status
    assert not any(status["tasks"].values()), status["tasks"]
    out = (log_dir / "worker.out").read_text()
    assert out.index("node checks for standin passed") < out.index("at start (--configfile), before the first batch")
    assert "claimed task" not in out


def test_a_worker_stopped_while_its_policy_loads_at_start_exits_and_leaves_no_server(
    labtasker_url, queue, workers, tmp_path
):
    """SIGTERM while the policy server started at start is still loading (a model that takes minutes): the worker
    stops that start, exits 0 promptly, and no process of the policy's command outlives it."""
    marker = f"prestart-{uuid.uuid4().hex}".encode()
    workdir = tmp_path / "wf"
    workdir.mkdir()
    slow = {
        "name": "slow",
        "command": f'{{python}} -c "import time; time.sleep(300)" {marker.decode()} {{port}}',
        "startup_timeout_s": 600,
    }
    campaign = write_config(workdir / "campaign.yaml", standin_config(workdir, policy=slow))
    process, log_dir = workers.start("w", allow=[workdir, REPO], extra=["--configfile", str(campaign)])

    wait_for(lambda: status_of(log_dir).get("policy_server_state") == "loading", 60, "the policy server loading")
    wait_for(lambda: any(marker in line for line in cmdlines()), 30, "the policy's process")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0, (log_dir / "worker.out").read_text()[-2000:]
    assert not [line for line in cmdlines() if marker in line], "the policy's process outlived the worker"
    assert "did not start at start" not in (log_dir / "worker.out").read_text(), "a stop is not a failed start"
