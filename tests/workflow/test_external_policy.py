"""policy.url: evaluate against a policy server that is already running (started here, outside any worker)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from conftest import REPO, run_snakemake, standin_config, standin_server, write_config

from evalwf.common.errors import ResultValidationError
from evalwf.contract.loopback import free_port
from evalwf.plan.results import check_policy_servers
from evalwf.policy.spec import EXTERNAL_ENDPOINT, PolicySpec, metadata_digest
from evalwf.worker.policy_server import GuardedPolicyServer

PROFILE = ["--profile", str(REPO / "profiles" / "local")]


def url_config(workdir: Path, url: str, **policy: object) -> Path:
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 4})
    config["policy"] = {"name": "my-policy", "url": url, "checkpoint": "ckpt-7", **policy}
    return write_config(workdir / "campaign.yaml", config)


def test_identity_is_name_checkpoint_protocol_not_the_url():
    a = PolicySpec.from_config({"name": "p", "url": "ws://a:1", "checkpoint": "c"})
    b = PolicySpec.from_config({"name": "p", "url": "ws://b:2", "checkpoint": "c"})
    assert a.identity == b.identity != PolicySpec.from_config({"name": "p", "url": "ws://a:1"}).identity
    assert a.identity_block() == {"name": "p", "protocol": "openpi-websocket", "checkpoint": "c", "external": True}
    # the block a task carries (no url) parses on a worker, as an external policy with the same identity
    assert PolicySpec.from_config(a.identity_block()).identity == a.identity
    command = PolicySpec.from_config({"name": "p", "command": "serve {port}"})
    assert set(command.identity_block()) == {"name", "command", "env", "protocol", "checkpoint"}
    assert metadata_digest({"action_dim": 7, "pid": 1}) == metadata_digest({"pid": 2, "action_dim": 7})
    assert metadata_digest({"action_dim": 7}) != metadata_digest({"action_dim": 8})


def test_a_worker_starts_nothing_for_an_external_policy(tmp_path):
    """An external policy skips the worker's GuardedPolicyServer altogether: nothing started, stopped or waited
    for; the job step gets EXTERNAL_ENDPOINT (it then uses policy.url) and the worker reports "external"."""
    from evalwf.worker.shared_server import SharedPolicyServer

    spec = PolicySpec.from_config({"name": "p", "external": True, "checkpoint": "c"})
    server = GuardedPolicyServer(log_dir=tmp_path)
    with SharedPolicyServer(server).lease(spec, threading.Event()) as served:
        assert served.endpoint == EXTERNAL_ENDPOINT
    assert server.process is None and server.loads == 0 and server.spec is None


@pytest.mark.slow  # three small local campaigns, about 40 s
def test_campaign_against_a_running_server_and_moving_it_reruns_nothing(tmp_path):
    with standin_server("--noise", "1.2") as url:
        configfile = url_config(tmp_path, url)
        run_snakemake(tmp_path, *PROFILE, "--configfile", str(configfile))
        root = tmp_path / "results" / "t" / "standin"
        batches = [json.loads(p.read_text()) for p in sorted((root / "batches").rglob("*.json"))]
        assert len(batches) == 2
        expected = PolicySpec.from_config({"name": "my-policy", "url": url, "checkpoint": "ckpt-7"}).identity
        assert {b["policy_identity"] for b in batches} == {expected}
        servers = {json.dumps(b["policy_server"], sort_keys=True) for b in batches}
        assert len(servers) == 1 and json.loads(servers.pop())["url"] == url
        logs = "".join(p.read_text() for p in (root / "logs").rglob("*.log"))
        assert logs.count(f"checking the external server {url} (openpi handshake)") == 2
        assert "starting policy server" not in logs  # nothing started for the batches
        assert (root / "task_summary.csv").exists()
    # the same server elsewhere (another port): nothing reruns
    with standin_server("--noise", "1.2") as moved:
        configfile = url_config(tmp_path, moved)
        dry = run_snakemake(tmp_path, *PROFILE, "--configfile", str(configfile), "-n")
        assert "Nothing to be done" in dry.stdout + dry.stderr


def test_a_server_that_is_not_there_fails_the_batch_naming_the_url(tmp_path):
    url = f"ws://127.0.0.1:{free_port()}"  # nobody listens there
    configfile = url_config(tmp_path, url, startup_timeout_s=2)
    failed = run_snakemake(tmp_path, *PROFILE, "--configfile", str(configfile), check=False)
    assert failed.returncode != 0
    log = failed.stdout + failed.stderr
    assert f"policy.url {url}: no openpi websocket server answered the handshake within 2s" in log


def test_batches_of_differently_described_servers_never_mix():
    same = {"url": "ws://a:1", "metadata_digest": "aaa"}
    check_policy_servers({"b1.json": same, "b2.json": {**same, "url": "ws://b:2"}})  # moved: fine
    with pytest.raises(ResultValidationError, match=r"metadata aaa: 1 batch.*metadata bbb: 1 batch\(es\), e.g. b2"):
        check_policy_servers({"b1.json": same, "b2.json": {"url": "ws://a:1", "metadata_digest": "bbb"}})
