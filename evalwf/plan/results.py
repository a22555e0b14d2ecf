"""Batch result files: built by the evaluator, written atomically, validated in layers before aggregation."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

import jsonschema

from evalwf.benchmark.batches import EpisodeRange
from evalwf.common.atomic import atomic_write_json
from evalwf.common.errors import ResultValidationError
from evalwf.common.json_types import JsonValue
from evalwf.contract.policy_identity import serving_refusal
from evalwf.plan.batch_environment import BatchEnvironment
from evalwf.plan.manifest import ManifestDocument


class WorkerInfo(TypedDict):
    """Where a batch ran."""

    host: str
    pid: int
    gpu: str | None
    worker_id: str | None
    labtasker_task_id: str | None


class PolicyServerRecord(TypedDict, total=False):
    """An external server a batch was evaluated against (policy.url): where, and what its metadata said."""

    url: str
    metadata_digest: str


# One episode's record: `index`, `success` and what its benchmark records (seed, steps, instruction, extra, ...)
EpisodeRecord = dict[str, JsonValue]


class BatchResult(TypedDict, total=False):
    """A batch result file (evalwf/plan/batch_result.schema.json; every key but the last three is required; a file
    written before batches recorded their environment has none)."""

    schema: str
    schema_version: int
    run: str
    benchmark: str
    suite: str
    task: str
    episode_start: int
    num_episodes: int
    manifest_hash: str
    policy_identity: str
    episodes: list[EpisodeRecord]
    success_count: int
    worker: WorkerInfo
    started_at: str
    finished_at: str
    duration_s: float
    policy_server: PolicyServerRecord
    environment: BatchEnvironment


RESULT_SCHEMA = "policy-eval.batch-result"
RESULT_SCHEMA_VERSION = 1
# The key of what an adaptive sweep writes in place of a speculative batch it cancelled before it started (its
# policy was dropped first): the job's output exists, so the run goes on, but it is no result (evalwf.plan.rounds).
CANCELLED_SPECULATIVE = "cancelled_speculative"
EPISODES_RUN = "episodes_run"  # ... and how many of its episodes ran before it stopped (spent)


@cache
def _result_schema() -> dict[str, JsonValue]:
    text = resources.files("evalwf.plan").joinpath("batch_result.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def _result_validator() -> Any:
    """Checked once: jsonschema.validate re-checks the schema itself on every call (about 5 ms a file, 94 % of
    validating a batch), which a dry run or summary of a 1400-batch campaign pays 1400 times."""
    schema = _result_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def worker_info() -> WorkerInfo:
    """Where a batch ran, for tracing a bad result back to a machine and GPU."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("EVAL_GPU_LABEL"),
        "worker_id": os.environ.get("EVAL_WORKER_ID"),
        "labtasker_task_id": os.environ.get("EVAL_LABTASKER_TASK_ID"),
    }


def build_batch_result(
    *,
    run: str,
    benchmark: str,
    suite: str,
    task: str,
    episodes: EpisodeRange,
    manifest_hash: str,
    policy_identity: str,
    records: list[EpisodeRecord],
    started_at: str,
    finished_at: str,
    duration_s: float,
) -> BatchResult:
    return {
        "schema": RESULT_SCHEMA,
        "schema_version": RESULT_SCHEMA_VERSION,
        "run": run,
        "benchmark": benchmark,
        "suite": suite,
        "task": task,
        "episode_start": episodes.start,
        "num_episodes": episodes.count,
        "manifest_hash": manifest_hash,
        "policy_identity": policy_identity,
        "episodes": records,
        "success_count": sum(1 for r in records if r["success"]),
        "worker": worker_info(),
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_s": duration_s,
    }


def write_batch_result(path: str | os.PathLike[str], result: BatchResult) -> None:
    atomic_write_json(path, result)


def write_cancelled_speculative(path: str | os.PathLike[str], reason: str, episodes_run: int = 0) -> None:
    """What a speculative batch of an adaptive sweep writes in place of its result when its policy was dropped
    (before it started, or between its episodes: `episodes_run`, spent and never read): the output exists, so the
    run goes on, and says why; validation refuses it as a result, naming it."""
    atomic_write_json(path, {CANCELLED_SPECULATIVE: reason, EPISODES_RUN: episodes_run})


@dataclass(frozen=True)
class BatchExpectation:
    """What a batch file must contain to count toward the summary."""

    benchmark: str
    suite: str
    task: str
    episodes: EpisodeRange
    manifest: ManifestDocument
    policy_identity: str
    setup_keys: tuple[str, ...]


def validate_batch_result(path: str | os.PathLike[str], expected: BatchExpectation) -> BatchResult:
    """Check a batch file layer by layer; raise ResultValidationError naming the file and the problem."""
    source = Path(path)

    def fail(reason: str) -> ResultValidationError:
        return ResultValidationError(
            f"invalid batch result {source}: {reason}. Delete the file and rerun snakemake to recompute this batch."
        )

    try:
        result = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise fail("file is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise fail(f"not readable JSON ({exc})") from None
    # Layer 1: schema and version.
    if isinstance(result, dict) and CANCELLED_SPECULATIVE in result:
        raise fail(
            "a speculative batch of an adaptive sweep, cancelled before it ran because its policy had been dropped "
            f"({result[CANCELLED_SPECULATIVE]}); it holds no episodes"
        )
    if not isinstance(result, dict) or result.get("schema") != RESULT_SCHEMA:
        raise fail(f"not a {RESULT_SCHEMA} file")
    if result.get("schema_version") != RESULT_SCHEMA_VERSION:
        raise fail(f"schema_version {result.get('schema_version')!r}, expected {RESULT_SCHEMA_VERSION}")
    exc = jsonschema.exceptions.best_match(_result_validator().iter_errors(result))  # as jsonschema.validate
    if exc is not None:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise fail(f"schema violation at {where}: {exc.message}") from None
    # Layer 2: identity of the batch.
    for key, want in (("benchmark", expected.benchmark), ("suite", expected.suite), ("task", expected.task)):
        if result[key] != want:
            raise fail(f"{key} is {result[key]!r}, expected {want!r}")
    if (result["episode_start"], result["num_episodes"]) != (expected.episodes.start, expected.episodes.count):
        raise fail(
            f"covers episodes {result['episode_start']}+{result['num_episodes']}, "
            f"expected {expected.episodes.start}+{expected.episodes.count}"
        )
    indices = [r["index"] for r in result["episodes"]]
    if indices != expected.episodes.indices():
        raise fail(f"episode indices {indices} != expected {expected.episodes.indices()}")
    if result["manifest_hash"] != expected.manifest["manifest_hash"]:
        raise fail(
            f"manifest_hash {result['manifest_hash']} != current manifest {expected.manifest['manifest_hash']} "
            "(the episodes were defined differently when this batch ran)"
        )
    refusal = serving_refusal(
        result["policy_identity"],  # the policy that evaluated the batch
        expected.policy_identity,
        lambda served, needed: (
            f"policy_identity {served!r} != configured policy {needed!r} (results of different policies never mix)"
        ),
    )
    if refusal is not None:
        raise fail(refusal)
    # Layer 3: every episode matches its manifest entry.
    for record in result["episodes"]:
        entry = expected.manifest["episodes"][record["index"]]
        if record["seed"] != entry["seed"]:
            raise fail(f"episode {record['index']}: seed {record['seed']} != manifest seed {entry['seed']}")
        for key in expected.setup_keys:
            if record["setup"].get(key) != entry.get(key):
                raise fail(
                    f"episode {record['index']}: setup {key}={record['setup'].get(key)!r} "
                    f"!= manifest {entry.get(key)!r}"
                )
    # Layer 4: counts add up.
    flags = sum(1 for r in result["episodes"] if r["success"])
    if result["success_count"] != flags:
        raise fail(f"success_count {result['success_count']} != sum of episode success flags {flags}")
    return result


def check_policy_servers(servers: dict[str, PolicyServerRecord | None]) -> None:
    """Batches evaluated against an external server (policy.url) carry what its metadata said (a digest): all of a
    run's batches must agree, so results of two different servers behind one name never mix. `servers` maps each
    batch file to its `policy_server` record."""
    groups: dict[str, list[str]] = {}
    for path, server in servers.items():
        digest = (server or {}).get("metadata_digest") or "none recorded"
        groups.setdefault(digest, []).append(path)
    if len(groups) > 1:
        described = "; ".join(
            f"metadata {digest}: {len(paths)} batch(es), e.g. {sorted(paths)[0]}" for digest, paths in groups.items()
        )
        raise ResultValidationError(
            f"batches of this run were evaluated against policy servers that describe themselves differently "
            f"({described}). Results of different policies never mix: delete the batches of the wrong server and "
            "rerun snakemake."
        )
