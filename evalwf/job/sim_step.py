"""The simulator side of a job step: evaluate one batch, or seal one manifest, in the benchmark's own interpreter.

    python -m evalwf.job.sim_step --request request.json      # internal: started by the job bodies, not by people

The job bodies (evalwf.rules.jobs, in the workflow's interpreter) resolve everything that needs the workflow (the
plan, the policy endpoint and its health check) and hand the rest over as one JSON request, a BatchRequest or a
ManifestRequest (evalwf.contract.sim_request: both sides use the same classes; a malformed one is refused naming
the field).

A batch writes its result JSON to `output` atomically, with the environment it ran in
(evalwf.plan.batch_environment); a manifest is sealed at `output` (and in the cache) as
evalwf.plan.manifest does. Both first check that the environment the manifest definition records (read when
the workflow was parsed, evalwf.plan.environment) is this interpreter's. Exit status 0 on success; otherwise
the traceback is on stderr, followed by one line `sim_step failed: <error type>: <first line of its message>`,
which the job step raises as its own error (evalwf.job.interpreter).

This module and everything it imports (the light core: scripts/light_core.py lists it) need only numpy, msgpack,
websockets, PyYAML and jsonschema, and run on Python >= 3.10 with numpy >= 1.26: never Snakemake, Labtasker or
pandas. `make lint` checks that on Python 3.10 (scripts/light_core.py --check, tests/layout/test_light_core.py), and
tests/workflow/test_simulator_interpreter.py runs campaigns through that interpreter, a virtualenv that has none of
them. The benchmark's adapter imports its simulator lazily.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter
from evalwf.benchmark.batches import EpisodeRange
from evalwf.contract.sim_request import BatchRequest, ManifestRequest, SimRequest, StopIfDropped, request_from_json
from evalwf.job.interpreter import FAILURE_PREFIX
from evalwf.plan.batch_environment import batch_environment
from evalwf.plan.environment import check_recorded
from evalwf.plan.manifest import load_manifest, manifest_bundle, seal_manifest
from evalwf.plan.results import build_batch_result, write_batch_result, write_cancelled_speculative
from evalwf.policy.client import PolicyClient


def log(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()  # noqa: UP017 (Python 3.10: RoboTwin's interpreter)


def dropped_by(stop: StopIfDropped | None) -> str | None:
    """Why a speculative batch stops now: a round decision written since it started dropped its policy."""
    for path in stop.decisions if stop else []:
        try:
            decision = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not written yet (or being written: it is published by a rename, so not for long)
        record = decision.get("dropped", {}).get(stop.policy) if isinstance(decision, dict) else None
        if record:
            return f"{stop.policy} was dropped after round {record.get('round')} ({path})"
    return None


def evaluate_batch(request: BatchRequest) -> None:
    """Evaluate episodes [episode_start, episode_start + episode_count) of one task; write the result."""
    benchmark, suite, task = request.benchmark, request.suite, request.task
    episodes = EpisodeRange(request.episode_start, request.episode_count)
    adapter = get_adapter(benchmark)
    manifest = load_manifest(request.manifest_path, request.manifest_hash)
    where = f"manifest {request.manifest_path}"
    settings = benchmark_settings(benchmark, request.section)
    check_recorded(benchmark, settings, manifest["definition"].get("environment"), where)
    started_at, started = _now(), time.monotonic()
    log(f"{benchmark} {suite}/{task} episodes {episodes.start}..{episodes.stop - 1}: start")
    with PolicyClient(
        request.endpoint,
        call_timeout_s=request.infer_timeout_s,
        server_process=request.server_process,  # the worker's server: verified before any observation
    ) as client:
        context = BatchContext(
            TaskRef(benchmark, suite, task),
            episodes,
            manifest,
            settings,
            client,
            Path(request.artifacts_dir),
            log,
            video_dir=Path(request.video_dir) if request.video_dir else None,
        )
        records, dropped = [], None
        for record in adapter.evaluate_batch(context):
            records.append(record)
            outcome = "success" if record["success"] else "failure"
            log(f"  episode {record['index']}: {outcome} in {record['steps']} steps ({record['duration_s']:.1f}s)")
            dropped = dropped_by(request.stop_if_dropped)
            if dropped and len(records) < episodes.count:
                break  # the generator closes: the adapter's own cleanup runs
    if dropped and len(records) < episodes.count:
        reason = f"{dropped}; stopped after {len(records)} of its {episodes.count} episodes"
        write_cancelled_speculative(request.output, reason, len(records))
        log(f"{request.output}: discarded (speculative): {reason}")
        return
    if [r["index"] for r in records] != episodes.indices():
        raise RuntimeError(
            f"{benchmark} adapter returned episodes {[r['index'] for r in records]}, expected {episodes.indices()}"
        )
    result = build_batch_result(
        run=request.run,
        benchmark=benchmark,
        suite=suite,
        task=task,
        episodes=episodes,
        manifest_hash=manifest["manifest_hash"],
        policy_identity=request.policy_identity,
        records=records,
        started_at=started_at,
        finished_at=_now(),
        duration_s=round(time.monotonic() - started, 3),
    )
    if request.policy_server is not None:  # an external server: its URL and metadata digest
        result["policy_server"] = {
            "url": request.policy_server.url,
            "metadata_digest": request.policy_server.metadata_digest,
        }
    bundle = manifest_bundle(request.manifest_path)
    if bundle is not None:  # the manifest came from `evalwf manifests import`: the bundle's hash
        result["manifest_bundle"] = bundle
    result["worker"]["python"] = sys.executable
    result["environment"] = batch_environment(adapter, settings)  # after the episodes: once a batch, never per episode
    write_batch_result(request.output, result)
    log(f"{request.output}: {result['success_count']}/{episodes.count} successes")


def seal_task_manifest(request: ManifestRequest) -> None:
    where = f"manifest {request.output}"
    settings = benchmark_settings(request.benchmark, request.section)
    check_recorded(request.benchmark, settings, request.definition.get("environment"), where)
    manifest = seal_manifest(
        get_adapter(request.benchmark),
        request.definition,
        request.scope,
        request.task,
        request.output,
        request.cache_dir,
        log,
    )
    log(f"manifest {request.output}: {len(manifest['episodes'])} episodes, hash {manifest['manifest_hash']}")


def run_request(request: SimRequest) -> None:
    """Run one request in this interpreter (a job body without a benchmark interpreter calls this directly)."""
    if isinstance(request, BatchRequest):
        evaluate_batch(request)
    else:
        seal_task_manifest(request)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--request", required=True, help="the JSON request file written by the job body")
    args = parser.parse_args(argv)
    try:
        run_request(request_from_json(Path(args.request).read_text(encoding="utf-8")))
    except Exception as error:  # the traceback for the log, then the cause's first line for the job's own error
        traceback.print_exc()
        first = (str(error).strip().splitlines() or [""])[0]
        print(f"{FAILURE_PREFIX}{type(error).__name__}: {first}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
