"""The queue beyond one machine, proven with network namespaces on this machine: the Labtasker server in
one namespace, two workers in another, the submitter in a third, joined by veth pairs to a bridge in the server's
namespace, addresses from the benchmarking range 198.18.0.0/15 and no default route (traffic stays inside). The
workflow directory is shared through the filesystem, as on a cluster.

Shown: the campaign completes; a worker without the token is refused; the workers' link down for 30 s and back up
loses and duplicates nothing (one job-step log per run under .snakemake/labtasker/tasks/<task>/); the token is on
no command line during the campaign; every namespace is removed at the end, also when the test fails.

Needs root (CI runs as root); skipped, saying so, where `ip netns add` is not permitted.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SNAKEFILE, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, REPO, cmdlines, wait_for

pytestmark = pytest.mark.slow

SERVER_IP, WORKERS_IP, SUBMITTER_IP = "198.18.0.1", "198.18.0.2", "198.18.0.3"
PORT = 18080
LINK_DOWN_S = 30
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


class Hosts:
    """Three namespaces (server, workers, submitter) on a bridge in the server's namespace."""

    def __init__(self) -> None:
        tag = f"ev{os.getpid() % 100000}"
        self.server, self.workers, self.submitter = f"{tag}-srv", f"{tag}-wrk", f"{tag}-sub"
        self.workers_link = f"{tag}w0"  # the server side of the workers' veth pair
        self.tag = tag
        self.created: list[str] = []

    def create(self) -> None:
        for name in (self.server, self.workers, self.submitter):
            ip("netns", "add", name)
            self.created.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        ip("-n", self.server, "link", "add", "br0", "type", "bridge")
        ip("-n", self.server, "addr", "add", f"{SERVER_IP}/24", "dev", "br0")
        ip("-n", self.server, "link", "set", "br0", "up")
        for peer, address, side in ((self.workers, WORKERS_IP, "w"), (self.submitter, SUBMITTER_IP, "s")):
            near, far = f"{self.tag}{side}0", f"{self.tag}{side}1"
            ip("-n", self.server, "link", "add", near, "type", "veth", "peer", "name", far, "netns", peer)
            ip("-n", self.server, "link", "set", near, "master", "br0")
            ip("-n", self.server, "link", "set", near, "up")
            ip("-n", peer, "addr", "add", f"{address}/24", "dev", far)
            ip("-n", peer, "link", "set", far, "up")

    def remove(self) -> list[str]:
        """Delete every namespace (their veth pairs and bridge go with them); returns those still listed."""
        for name in self.created:
            ip("netns", "del", name, check=False)
        listed = ip("netns", "list", check=False).stdout
        return [name for name in self.created if name in listed]

    @staticmethod
    def run_in(namespace: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", namespace, *argv]


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    if shutil.which("ip") is None:
        pytest.skip("multi-host test needs iproute2 (`ip`)")
    probe = f"evprobe{os.getpid() % 100000}"
    added = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if added.returncode != 0:
        pytest.skip(f"`ip netns add` is not permitted here (needs root / CAP_SYS_ADMIN): {added.stderr.strip()}")
    ip("netns", "del", probe, check=False)
    topology = Hosts()
    processes: list[subprocess.Popen[bytes]] = []
    topology.processes = processes  # type: ignore[attr-defined]
    try:
        topology.create()
        yield topology
    finally:  # a finalizer: runs when the test fails too
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        left = topology.remove()
        assert not left, f"network namespaces left behind: {left}"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES and not k.startswith("LABTASKER_")}
    env.update(extra)
    return env


def start(hosts: Hosts, namespace: str, argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            hosts.run_in(namespace, argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    hosts.processes.append(process)  # type: ignore[attr-defined]
    return process


def worker_argv(url: str, queue: str, workdir: Path, log_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "evalwf.worker.main", "--gpus", "0", "--queue", queue, "--url", url,
        "--allow-workflow", str(workdir), "--allow-workflow", str(REPO), "--log-dir", str(log_dir),
        "--poll-max", "1", "--heartbeat", "5",
    ]  # fmt: skip


def test_campaign_across_three_hosts_survives_a_30_s_link_outage(hosts: Hosts, tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    queue = f"mh-{secrets.token_hex(4)}"
    url = f"http://{SERVER_IP}:{PORT}"
    workdir = tmp_path / "shared" / "wf"  # the "shared filesystem": every namespace sees the same directory
    workdir.mkdir(parents=True)
    section = {
        "suites": {"alpha": ["reach", "push"]},
        "episodes_per_task": 4,
        "batch_size": 2,
        "max_steps": 30,
        "step_time_s": {"default": 0.1},
    }
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir, standin=section))

    # nothing leaves the namespaces: no default route anywhere
    for namespace in (hosts.server, hosts.workers, hosts.submitter):
        routes = ip("-n", namespace, "route", "show").stdout
        assert "default" not in routes and all(r.startswith("198.18.") for r in routes.splitlines()), routes

    server_root = tmp_path / "server"
    server_root.mkdir()
    server = start(
        hosts, hosts.server,
        [sys.executable, "-m", "labtasker_server", "serve", "--connection", "http", "--host", SERVER_IP,
         "--port", str(PORT), "--labtasker-root", str(server_root), "--database-filesystem", "local"],
        tmp_path / "server.log", clean_env(LABTASKER_SERVER_TOKEN=token),  # the environment, never argv
    )  # fmt: skip

    def server_up() -> bool:
        assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        probe = hosts.run_in(hosts.submitter, [sys.executable, "-c", PROBE, url, token, queue])
        return subprocess.run(probe, capture_output=True, env=clean_env(), timeout=60).returncode == 0

    wait_for(server_up, 60, "the server in its namespace to answer the submitter's namespace", interval=0.5)

    # a worker without the token is refused, and says why
    tokenless = subprocess.run(
        hosts.run_in(hosts.workers, worker_argv(url, queue, workdir, tmp_path / "workers" / "tokenless")),
        capture_output=True, text=True, env=clean_env(), timeout=120,
    )  # fmt: skip
    assert tokenless.returncode == 1, tokenless.stdout + tokenless.stderr
    assert "token is missing or wrong" in tokenless.stdout + tokenless.stderr

    logs = {name: tmp_path / "workers" / name for name in ("a", "b")}
    for log_dir in logs.values():
        start(hosts, hosts.workers, worker_argv(url, queue, workdir, log_dir), log_dir / "worker.out",
              clean_env(LABTASKER_TOKEN=token))  # fmt: skip
    submit = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", url, "--labtasker-queue", queue,
    ]  # fmt: skip
    submitter = start(hosts, hosts.submitter, submit, tmp_path / "submitter.log", clean_env(LABTASKER_TOKEN=token))

    tasks_dir = workdir / ".snakemake" / "labtasker" / "tasks"
    batches = workdir / "results" / "t" / "standin" / "batches"

    def a_batch_running() -> bool:
        assert submitter.poll() is None, (tmp_path / "submitter.log").read_text()[-3000:]
        return any("evaluate_batch" in name for name in running_tasks(logs))

    wait_for(a_batch_running, 240, "a batch running on a worker")
    ip("-n", hosts.server, "link", "set", hosts.workers_link, "down")
    down_at = time.monotonic()
    leaks = 0
    while time.monotonic() - down_at < LINK_DOWN_S:
        leaks += sum(token.encode() in line for line in cmdlines())
        time.sleep(0.5)
    ip("-n", hosts.server, "link", "set", hosts.workers_link, "up")
    outage_log = "".join((d / "worker.out").read_text(errors="replace") for d in logs.values())
    assert "transport error" in outage_log or "server unreachable" in outage_log, "the outage reached the workers"

    deadline = time.monotonic() + 400
    while submitter.poll() is None and time.monotonic() < deadline:
        leaks += sum(token.encode() in line for line in cmdlines())
        time.sleep(1)
    assert submitter.poll() == 0, (tmp_path / "submitter.log").read_text()[-4000:]
    assert leaks == 0, "the token was on a command line during the campaign"

    runs = {d.name: len(list(d.glob("*.log"))) for d in tasks_dir.iterdir()}
    assert len(runs) == 6 and set(runs.values()) == {1}, f"one job-step run per task, none lost or repeated: {runs}"
    assert len(list(batches.rglob("*.json"))) == 4
    assert (workdir / "results" / "t" / "standin" / "task_summary.csv").exists()
    statuses = [json.loads((d / "status.json").read_text()) for d in logs.values()]
    assert sum(s["tasks"]["succeeded"] for s in statuses) == 6 and all(s["tasks"]["failed"] == 0 for s in statuses)
    for path in [*tmp_path.rglob("*.log"), *tmp_path.rglob("*.out"), *tmp_path.rglob("*.json")]:
        assert token not in path.read_text(errors="replace"), f"the token is in {path}"


def running_tasks(logs: dict[str, Path]) -> list[str]:
    names: list[str] = []
    for log_dir in logs.values():
        path = log_dir / "status.json"
        if path.exists():
            try:
                names += list(json.loads(path.read_text())["running"].values())
            except (ValueError, KeyError):
                pass
    return names


PROBE = """
import sys
from labtasker import Client
url, token, queue = sys.argv[1:4]
with Client(url=url, queue=queue, token=token) as client:
    client.create_queue(queue)
"""
