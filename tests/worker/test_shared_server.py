"""evalwf.worker.shared_server: what a lease tells the job step of its server (the JobStepContext the worker hands
on) is the server it leased: the identity served, its endpoint and process; an external policy's names no process."""

from __future__ import annotations

import threading

from evalwf.policy.spec import EXTERNAL_ENDPOINT, PolicySpec
from evalwf.worker.policy_server import GuardedPolicyServer
from evalwf.worker.shared_server import SharedPolicyServer

LOCAL = PolicySpec.from_config(
    {"name": "standin-policy", "command": "{python} -m benchmarks.standin.policy_server --port {port}"}
)
EXTERNAL = PolicySpec.from_config({"name": "remote-policy", "external": True, "checkpoint": "c"})


def test_a_lease_names_the_server_it_leased_and_an_external_policy_names_no_process(tmp_path):
    server = GuardedPolicyServer(log_dir=tmp_path)
    shared = SharedPolicyServer(server)
    try:
        with shared.lease(LOCAL, threading.Event()) as served:
            assert served.policy_identity == LOCAL.identity and served.endpoint == server.endpoint
            assert served.server_process is not None and served.server_process == server.process_identity
            assert served.cause_file is None  # the task run adds where its job body says why it failed
        # the worker's own server keeps running for its policy's next batch, while a batch of an external policy
        # goes to the config's URL: its job step is told no process of the worker's to find answering
        with shared.lease(EXTERNAL, threading.Event()) as served:
            assert server.alive()
            assert (served.policy_identity, served.endpoint) == (EXTERNAL.identity, EXTERNAL_ENDPOINT)
            assert served.server_process is None
            assert served.serving(EXTERNAL.identity) is None and served.serving(LOCAL.identity) is not None
    finally:
        server.stop()
