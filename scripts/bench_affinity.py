"""What policy affinity saves: the sweep of tests/plugin/test_sweep.py (3 stand-in policies x 9 batches + 3
manifests) through a real Labtasker server and a fresh pair of real workers, once with affinity and once with it
switched off on the workers (EVAL_POLICY_AFFINITY=0).

    python scripts/bench_affinity.py [--runs 1]

Prints, per run and mode, the policy server loads per worker and the campaign's span. The test asserts the bound
with affinity (at most policies + 1 loads per worker); the count without it is only measured, here.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "executor")]

from labtasker_testkit import Workers, start_url_server  # noqa: E402
from test_sweep import NOISE, REMOTE_JOBS, run_campaign  # noqa: E402

from evalwf.queue.embedded_server import stop_embedded_server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="campaigns per mode")
    args = parser.parse_args()
    from labtasker import Client

    base = Path(tempfile.mkdtemp(prefix="bench-affinity-"))
    token = secrets.token_urlsafe(32)
    url = start_url_server(base / "server", token)
    os.environ["LABTASKER_TOKEN"] = token
    try:
        for run in range(args.runs):
            for mode, env in (
                ("with affinity", {}),
                ("without (EVAL_POLICY_AFFINITY=0)", {"EVAL_POLICY_AFFINITY": "0"}),
            ):
                queue = f"bench-{secrets.token_hex(4)}"
                workdir = base / f"run{run}-{len(env)}"
                workdir.mkdir()
                pool = Workers(url, queue, base / f"workers{run}-{len(env)}")
                try:
                    with Client(url=url, queue=queue) as client:
                        client.create_queue(queue)
                        found = run_campaign(pool, url, queue, client, workdir, "pair", env)
                finally:
                    pool.stop_all()
                print(
                    f"run {run + 1}, {mode}: {len(NOISE)} policies, {REMOTE_JOBS} jobs, 2 workers: policy server "
                    f"loads per worker {found['loads']}, span {found['span']:.1f} s",
                    flush=True,
                )
    finally:
        stop_embedded_server(base / "server")


if __name__ == "__main__":
    main()
