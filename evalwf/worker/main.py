"""Elastic GPU worker: claims Labtasker tasks (Snakemake job steps) and runs them against its own policy server.

    evalwf worker --gpus 0,1 [--slots K] [--queue Q] [--route R] [--idle-timeout S]
                                        [--allow-workflow DIR ...] [--url URL] [--configfile FILE ...]

`--gpus 0,1,...` starts one worker process per GPU (CUDA_VISIBLE_DEVICES set for everything it runs), each
under a guardian so that it dies with this process. Each GPU worker:
- owns ONE policy server (evalwf.worker.policy_server.GuardedPolicyServer) started from the policy of the
  campaign's own config files (a task carries only the policy identity, which must match), reused across
  batches while the policy identity is unchanged, restarted when it changes or the server died; its K job
  slots (--slots) share it; with --configfile (the campaign's config files) it is started at once, so that the
  first batch finds the policy loaded (evalwf/worker/policy_prestart.py);
- runs only Snakemake job steps of an allowed workflow directory (--allow-workflow, default: the current
  directory), whose command line it builds itself from an allow-list (evalwf/worker/job_payload.py: a
  task names a job, never a command), in that directory, with its own interpreter, under a guardian, with
  CUDA_VISIBLE_DEVICES / EVAL_WORKER_ID / EVAL_LABTASKER_TASK_ID and the job step's context (EVAL_JOB_STEP_CONTEXT:
  its policy server and where it writes why it failed, evalwf/contract/job_step_context.py) in the environment;
- starts each job step from a spare guardian that imported Snakemake and the Snakefile's modules while the slot
  was idle (evalwf/worker/warm_step.py), forked from the worker's one fork server, which imported them and parsed the
  Snakefile once (evalwf/worker/fork_server.py); --cold-job-steps for a fresh interpreter per step;
- runs the node checks of `evalwf doctor` (evalwf/worker/node_gate.py) before its first job of each benchmark of a
  campaign (at start for --configfile), and hands the jobs of a benchmark whose checks failed back uncharged, naming
  the refusal in its log and its queue registration (the submitter shows it);
- reports success only if the job's declared outputs exist (a job step whose submitter has exited silently
  exits 0 doing nothing);
- on SIGTERM/SIGINT/SIGHUP hands its tasks back uncharged (pending) and kills its children; after kill -9
  the guardians kill and reap them.

Without --url / LABTASKER_URL / LABTASKER_SOCKET the worker uses (and if needed starts) the embedded
Labtasker server of the first allowed workflow directory, the same one `snakemake --profile
profiles/labtasker` uses there, on its Unix socket (owner-only: no token exists). With a URL the token is read
from LABTASKER_TOKEN, removed from the environment of everything the worker starts and never written to a log.

The worker writes <log-dir>/status.json (policy server loads, tasks done, running tasks) after every change.
"""

from __future__ import annotations

import argparse
import os
import sys

from evalwf.contract import CLIENT_TOKEN_ENV, CLIENT_URL_ENV, DEFAULT_ROUTE, QUEUE_ENV, default_queue
from evalwf.contract.loopback import with_loopback_no_proxy
from evalwf.queue.resolver import QueueUnavailable, ResolvedQueue, resolve_queue
from evalwf.worker.gpu_worker import GpuWorker
from evalwf.worker.log import log
from evalwf.worker.supervisor import run_one_worker_per_gpu
from evalwf.worker.warm_step import WARM_ENV, warm_enabled


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="evalwf worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="0", help="comma-separated GPU ids: one worker process per GPU (default 0)")
    parser.add_argument("--slots", type=int, default=1, help="job slots per GPU sharing its policy server (default 1)")
    parser.add_argument(
        "--queue", default=default_queue(), help=f"Labtasker queue (default: ${QUEUE_ENV}, else evalwf)"
    )
    parser.add_argument("--route", default=DEFAULT_ROUTE, help="claim only tasks submitted with this route")
    parser.add_argument("--idle-timeout", type=float, default=0.0, help="exit after S idle seconds (0 = never)")
    parser.add_argument(
        "--allow-workflow",
        action="append",
        metavar="DIR",
        help="workflow directory whose job steps this worker may run (repeatable; default: current directory)",
    )
    parser.add_argument(
        "--allow-config",
        action="append",
        metavar="DIR",
        help="take config files only from inside these directories (repeatable; default: anywhere in an allowed "
        "workflow directory except where jobs write)",
    )
    parser.add_argument(
        "--configfile",
        nargs="+",
        default=None,
        metavar="FILE",
        help="the campaign's config file(s), as given to the submitter: the node is checked for their benchmarks "
        "at start (`evalwf doctor`'s checks, evalwf/worker/node_gate.py) and the policy server of their one policy "
        "started at once (evalwf/worker/policy_prestart.py); without it both wait for the first task. A benchmark "
        "whose checks fail is refused: its tasks go back to the queue uncharged",
    )
    parser.add_argument("--url", default=None, help=f"Labtasker server URL (default: ${CLIENT_URL_ENV}, else embedded)")
    parser.add_argument("--server-root", default=None, help="root of the embedded Labtasker server (see the plugin)")
    parser.add_argument(
        "--log-dir", default=None, help="logs and status.json (default: <workflow>/.snakemake/labtasker/workers/<id>)"
    )
    parser.add_argument("--worker-id", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--poll-max", type=float, default=2.0, help="longest pause between claims when idle (s)")
    parser.add_argument("--heartbeat", type=float, default=20.0, help="heartbeat interval while running (s)")
    parser.add_argument(
        "--cold-job-steps",
        action="store_true",
        default=not warm_enabled(),
        help=f"start every job step as a fresh `python -m snakemake` instead of from a spare that has Snakemake "
        f"imported already (evalwf/worker/warm_step.py; also {WARM_ENV}=0)",
    )
    return parser.parse_args(argv)


def worker_queue(options: argparse.Namespace) -> ResolvedQueue:
    """The queue this worker claims from: --url, else what every client finds (evalwf.queue.resolver), the embedded
    server of the first allowed workflow directory started when it is not running."""
    return resolve_queue(options.allow_workflow[0], url=options.url, server_root=options.server_root, log=log)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    with_loopback_no_proxy(os.environ)
    allowed = [os.path.realpath(d) for d in (options.allow_workflow or [os.getcwd()])]
    options.allow_workflow = allowed
    if options.allow_config:
        options.allow_config = [os.path.realpath(d) for d in options.allow_config]
    if options.configfile:
        options.configfile = [os.path.realpath(path) for path in options.configfile]
    try:
        queue = worker_queue(options)
    except QueueUnavailable as error:
        log(str(error))
        return 2
    if queue.warning:
        log(f"warning: {queue.warning}")
    assert queue.endpoint is not None  # a worker starts the embedded server when it is not running
    gpus = [g.strip() for g in str(options.gpus).split(",") if g.strip()]
    if not gpus:
        log("--gpus names no GPU")
        return 2
    if len(gpus) > 1:
        # the child workers read the token from the environment (and each removes it in turn); children of an
        # embedded server find it themselves (and so can restart it), a URL is passed on
        return run_one_worker_per_gpu(options, gpus, queue.endpoint.url)
    os.environ.pop(CLIENT_TOKEN_ENV, None)  # the endpoint holds it: never inherited by job steps or policy servers
    options.gpus = gpus[0]
    return GpuWorker(options, queue.endpoint, allowed, queue.keeper).run()


if __name__ == "__main__":
    sys.exit(main())
