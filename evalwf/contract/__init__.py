"""The contract between the executor plugin (snakemake_executor_plugin_labtasker, the submitting side) and the
workers (evalwf.worker): what a task carries, which queue and route by default, the environment variables and
resource names both sides use, the campaign key, and the rules both sides apply alike.

Names and pure functions only (and the failure cause file, written with evalwf.common.atomic). Never imports a
part of evalwf other than common, nor a benchmark, Snakemake or Labtasker, so the plugin, a worker, `status` or a
simulator's own interpreter (Python 3.10, standard library) can import it; the plugin imports nothing of evalwf
but this and evalwf.queue (tests/layout/test_import_boundaries.py). Its modules:

- this one: payload kind, version and keys, queue defaults and variables, resource names, campaign_key;
- affinity: the policy-affinity routes a batch is queued on and a worker claims from;
- allowed_files: where a worker takes code from (the submitter refuses what workers would refuse);
- failure: how a failed job says why (its cause travels as a small file, the first line a user reads);
- failure_record: why a batch failed, kept beside its output under results/ (what `make clean` leaves to explain it);
- job_step_context: what a worker tells the job step it starts (its policy server, where it says why it failed);
- policy_identity: whether a batch may be evaluated by what serves a policy identity (the one comparison);
- sim_request: the simulator step's request (BatchRequest, ManifestRequest), which the job bodies build and the
  simulator's interpreter reads;
- loopback: no proxy for loopback, free loopback ports.
"""

from __future__ import annotations

import hashlib
import os

PAYLOAD_KIND = "snakemake-job-step"
# Version 2: the payload names the job only (no command line, no policy block); the worker builds the job step's
# command from its own allow-list and the policy from the campaign's config files (invariant 6).
PAYLOAD_VERSION = 2
# Every key a version-2 payload may hold; a worker refuses any other (a hostile payload fails with the reason).
PAYLOAD_KEYS = frozenset(
    {
        "kind",
        "version",
        "campaign",  # campaign_key(workdir): checked against workdir; a worker not allowed there stops claiming it
        "workdir",  # absolute
        "snakefile",  # absolute
        "configfiles",  # relative to workdir (or absolute), each inside a directory the worker allows
        "rules",
        "wildcards",
        "target_jobs",  # Snakemake's --target-jobs entries: "rule:key=value,..."
        "local_groupid",  # group jobs only (the group job's id, a uuid string), else None
        "attempt",
        "latency_wait",
        "wait_for_files",  # relative to workdir, inside it
        "outputs",  # absolute
        "logs",  # absolute
        "resources",  # PAYLOAD_RESOURCES only
        "policy_identity",  # checked against the policy of the config files
    }
)
# The resources a task carries (the GPUs its job uses; a worker refuses any other).
PAYLOAD_RESOURCES = frozenset({"gpu"})
DEFAULT_QUEUE = "evalwf"
DEFAULT_ROUTE = "default"
# One variable names the queue for the submitter (Snakemake's setting variable), the workers and `status`.
QUEUE_ENV = "SNAKEMAKE_LABTASKER_QUEUE"
# Labtasker's own client variables, read by every client here alike (evalwf.queue.resolver): a shared server's URL
# and its token (never written to a log, never inherited by what a worker starts), or a server's Unix socket.
CLIENT_URL_ENV = "LABTASKER_URL"
CLIENT_TOKEN_ENV = "LABTASKER_TOKEN"
# ... or the path of an owner-only file holding that token (read when LABTASKER_TOKEN is not set)
CLIENT_TOKEN_FILE_ENV = "LABTASKER_TOKEN_FILE"
CLIENT_SOCKET_ENV = "LABTASKER_SOCKET"
# Task metadata naming the run of a task whose lease expired with its outputs written (its report was lost): the
# submitter requeues such a task with it, and a worker adopts that run's result instead of evaluating it again.
ADOPT_RUN_METADATA = "adopt_run"
# Task progress a worker reports when a job step starts (a submitter's Ctrl-C cancels claimed tasks without it).
JOB_STEP_PROGRESS = "job_step"
# Rule resources the workflow declares for the executor (operational: never rerun triggers).
EXPECTED_COST_RESOURCE = "expected_cost_s"
EPISODES_RESOURCE = "episodes"  # episodes a batch job evaluates (progress line); 0 / absent for other jobs
# the round of an adaptive sweep a batch lies in (0 for every other batch): the executor claims earlier rounds first
ROUND_RESOURCE = "adaptive_round"
# A worker's registration metadata (its Labtasker worker observation) names, under this key, the benchmarks it refuses
# because its node checks failed there: {campaign key: {benchmark: reason and fix}}; the submitter shows them.
WORKER_REFUSING_KEY = "refusing"
# What a worker puts into the environment of everything it starts.
WORKER_ID_ENV = "EVAL_WORKER_ID"
TASK_ID_ENV = "EVAL_LABTASKER_TASK_ID"


def campaign_key(workdir: str) -> str:
    """Tasks of one workflow directory share this metadata.campaign value (status rounds select by it)."""
    return resolved_campaign_key(os.path.realpath(workdir))


def resolved_campaign_key(workdir: str) -> str:
    """The campaign key of a workflow directory path that is already resolved, as a payload's `workdir` is (its
    submitter resolved it): a worker derives a task's campaign from its workdir this way, without believing the
    payload's own claim and without looking at its own filesystem."""
    return "c_" + hashlib.sha256(workdir.encode()).hexdigest()[:16]


def default_queue() -> str:
    return os.environ.get(QUEUE_ENV) or DEFAULT_QUEUE
