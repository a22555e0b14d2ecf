"""The LIBERO adapter on the real simulator (installed by scripts/setup_libero.sh; CI installs it).

This file runs INSIDE the LIBERO interpreter (.venv-libero, which has pytest): test_libero_interpreter.py runs it
there (`.venv-libero/bin/python -m pytest tests/benchmarks/libero/test_libero_sim.py` by hand). Collected by the
workflow's interpreter (which has Snakemake and never a simulator) it is skipped. In an interpreter meant for
LIBERO it is skipped when the simulator is not installed, unless REQUIRE_LIBERO=1, which makes that an error.

Its cost is LIBERO's resets and steps (about 3 CPU s and 0.3 each: scripts/bench_test_fixtures.py --libero), so
it runs few: one task (libero_spatial task 0), trials 0-1, max_steps 5 after the 10 wait steps, and each env built
checks several facts (about 1 minute on 2 cores). Episodes through a real policy server over the websocket, and
rendering with a worker's GPU label on a CPU machine, are checked on the real job path (test_libero_workflow.py).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.libero import env as libero_env

REASON = libero_env.unavailable_reason()
if importlib.util.find_spec("snakemake") is not None:  # the workflow's interpreter: not where LIBERO lives
    pytest.skip("runs in the LIBERO interpreter (test_libero_interpreter.py runs it there)", allow_module_level=True)
if REASON is not None and os.environ.get("REQUIRE_LIBERO") == "1":  # CI sets it: never skip silently there
    pytest.fail(f"REQUIRE_LIBERO=1 but the LIBERO simulator is not available: {REASON}", pytrace=False)
pytestmark = [
    pytest.mark.libero,
    pytest.mark.skipif(REASON is not None, reason=f"LIBERO simulator not available: {REASON}"),
]

from benchmarks.libero.init_states import load_init_states  # noqa: E402
from benchmarks.libero.observation import openpi_observation, quat_to_axis_angle  # noqa: E402
from benchmarks.libero.rng_states import encode_state  # noqa: E402
from benchmarks.libero.suites import DUMMY_ACTION, SUITES  # noqa: E402
from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter  # noqa: E402
from evalwf.benchmark.batches import EpisodeRange  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SUITE, TASK = "libero_spatial", 0
REF = TaskRef("libero", SUITE, str(TASK))
MAX_STEPS = 5
TRIALS = 2  # the second trial's scene depends on the first's reset: enough to prove the manifest's RNG states


ADAPTER = get_adapter("libero")


def bench_cfg(**overrides: Any) -> Any:
    """LIBERO's settings from a validated section (the schema fills every default, as in a campaign)."""
    from evalwf.plan.config import validate_section

    section = {"episodes_per_task": TRIALS, "batch_size": 1, "seed": 7, "suites": {SUITE: [TASK]},
               "max_steps": MAX_STEPS}  # fmt: skip
    section.update(overrides)
    return benchmark_settings("libero", validate_section("libero", section))


def frame_sha(obs: dict[str, Any]) -> str:
    return hashlib.sha256(np.ascontiguousarray(obs["agentview_image"]).tobytes()).hexdigest()


class HashPolicy:
    """A deterministic stand-in policy in process: small actions derived from a hash of the observation."""

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        digest = hashlib.sha256()
        for key in ("observation/image", "observation/wrist_image", "observation/state"):
            digest.update(np.ascontiguousarray(obs[key]).tobytes())
        rng = np.random.default_rng(int.from_bytes(digest.digest()[:8], "big"))
        actions = rng.uniform(-0.5, 0.5, (10, 7))
        actions[:, 6] = np.where(rng.random(10) < 0.5, -1.0, 1.0)
        return {"actions": actions.astype(np.float32)}


def run_batch(
    bench: Any, manifest: dict[str, Any], start: int, count: int, policy: Any, tmp_path: Path
) -> list[dict[str, Any]]:
    ctx = BatchContext(REF, EpisodeRange(start, count), manifest, bench, policy, tmp_path / "artifacts", print)
    return list(ADAPTER.evaluate_batch(ctx))


def without_duration(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records less their timings and where their videos went (a batch that records videos evaluates the same
    episodes)."""
    return [
        {k: v if k != "extra" else {x: y for x, y in v.items() if not x.startswith("video")} for k, v in r.items()
         if k not in ("duration_s", "reset_s")}
        for r in records
    ]  # fmt: skip


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> dict[str, Any]:
    """Built from scratch (fresh cache) for trials 0-1."""
    os.environ["LIBERO_RNG_CACHE_DIR"] = str(tmp_path_factory.mktemp("rng-cache"))
    try:
        definition = ADAPTER.manifest_definition(bench_cfg(), SUITE, str(TASK))
        body = ADAPTER.build_manifest(definition)
    finally:
        del os.environ["LIBERO_RNG_CACHE_DIR"]
    return {"definition": definition, "episodes": body.episodes, "extra": body.extra}


def test_task_table_matches_libero():
    """Every suite's tasks, languages and files as hf-libero's benchmark module defines them (that module
    imports torch, so its language function is taken from its source and compared for all 130 tasks)."""
    package = Path(importlib.util.find_spec("libero").submodule_search_locations[0])
    source = package / "libero" / "benchmark" / "__init__.py"
    tree = ast.parse(source.read_text())
    [func] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "grab_language_from_filename"]
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([func], []), str(source), "exec"), namespace)
    for suite, info in SUITES.items():
        for task_id in range(info.num_tasks):
            spec = libero_env.task_spec(suite, task_id)
            assert spec.language == namespace["grab_language_from_filename"](spec.name + ".bddl")
            assert spec.bddl_file.is_file() and spec.init_states_file.is_file()
    states = load_init_states(libero_env.task_spec(SUITE, TASK).init_states_file)
    assert states.shape[0] == 50 and states.dtype == np.float64
    with pytest.raises(ValueError, match=r"tasks 0\.\.9"):
        libero_env.task_spec(SUITE, 10)


def test_axis_angle_matches_robosuite():
    from robosuite.utils.transform_utils import quat2axisangle

    rng = np.random.default_rng(3)
    for _ in range(100):
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        assert np.array_equal(quat_to_axis_angle(quat), quat2axisangle(quat.copy()))
    assert np.array_equal(quat_to_axis_angle(np.array([0.0, 0.0, 0.0, 1.0])), np.zeros(3))


def test_manifest_records_the_sequential_rng_states(manifest):
    episodes = manifest["episodes"]
    assert [(e["index"], e["seed"], e["init_state_index"]) for e in episodes] == [(j, 7, j) for j in range(TRIALS)]
    # trial 0 starts right after env.seed(7) = np.random.seed(7); trial 1 after one reset
    assert episodes[0]["np_rng_state"] == encode_state(np.random.RandomState(7).get_state())
    assert len({e["np_rng_state"]["sha256"] for e in episodes}) == TRIALS
    language = "pick up the black bowl between the plate and the ramekin and place it on the plate"
    assert manifest["extra"]["language"] == language


@pytest.mark.slow
def test_batching_does_not_change_episodes_and_matches_the_sequential_loop(manifest, tmp_path):
    """Also record_video "failures" on the real simulator: the batch of the last trial alone records its video only
    if the trial failed, and evaluates the same episode as the batch without videos."""
    bench = bench_cfg()
    np.random.seed(2024)
    caller_state = np.random.get_state()
    policy = HashPolicy()
    together = run_batch(bench, manifest, 0, TRIALS, policy, tmp_path)
    # the last trial alone, in a batch of its own: it needs the RNG state of the reset it does not run
    last = TRIALS - 1
    last_alone = run_batch(bench_cfg(record_video="failures"), manifest, last, 1, policy, tmp_path / "alone")
    assert without_duration(together[last:]) == without_duration(last_alone)
    assert ("video" in last_alone[0]["extra"]) == (not last_alone[0]["success"])
    assert not any("video" in record["extra"] for record in together), "record_video none: no video"
    for record in together:
        assert record["steps"] == MAX_STEPS or record["success"]
        assert record["extra"]["max_steps"] == MAX_STEPS and record["extra"]["max_steps_override"] is True
        assert record["extra"]["rollout_consumed_global_rng"] is False
    after = np.random.get_state()
    assert after[0] == caller_state[0] and (after[1] == caller_state[1]).all() and after[2:] == caller_state[2:]

    # A plain openpi-style loop: one env, seeded once, trials in order with the same policy and horizon.
    spec = libero_env.task_spec(SUITE, TASK)
    init_states = load_init_states(spec.init_states_file)
    env = libero_env.make_env(spec, 256)
    plain = []
    try:
        np.random.seed(7)
        env.seed(7)
        for j in range(TRIALS):
            assert encode_state(np.random.get_state()) == manifest["episodes"][j]["np_rng_state"], (
                f"the sequential loop's RNG state before trial {j}'s reset differs from the manifest's"
            )
            env.reset()
            obs = env.set_init_state(init_states[j])
            first = frame_sha(obs)
            for _ in range(10):
                obs, _r, done, _i = env.step(list(DUMMY_ACTION))
            steps, done, plan = 0, False, []
            while steps < MAX_STEPS and not done:
                if not plan:
                    plan = list(policy.infer(openpi_observation(obs, spec.language, 224))["actions"][:5])
                obs, _r, done, _i = env.step(plan.pop(0).tolist())
                steps += 1
            plain.append({"first_frame_sha256": first, "steps": steps, "success": bool(done)})
        # the same init state without the resets before it shows a different scene: the manifest matters
        np.random.seed(7)
        env.reset()
        unsequenced = frame_sha(env.set_init_state(init_states[last]))
    finally:
        libero_env.close_env(env)
    assert [
        {"first_frame_sha256": r["extra"]["first_frame_sha256"], "steps": r["steps"], "success": r["success"]}
        for r in together
    ] == plain
    assert unsequenced != plain[last]["first_frame_sha256"]


class RecordingPolicy(HashPolicy):
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(obs)
        return super().infer(obs)


def test_video_is_written_when_asked_and_policy_bench_sends_what_the_batch_sent(manifest, tmp_path):
    """Real LIBERO frames: the mp4 next to the batch decodes to one frame per simulator step plus the first.

    The same batch's first request (one env for both facts): `evalwf policy bench` sends the adapter's sample
    request tagged as a job step tags it, with the same keys, dtypes and shapes (and instruction) as the first
    request a real LIBERO batch sends."""
    from videokit import count_frames

    from evalwf.policy.bench_load import RequestSource, tagged_request

    settings = bench_cfg(max_steps=6, record_video="all", camera_size=128)
    policy = RecordingPolicy()
    ctx = BatchContext(
        REF, EpisodeRange(0, 1), manifest, settings, policy, tmp_path / "artifacts", print,
        video_dir=tmp_path / "batches" / "videos",
    )  # fmt: skip
    [record] = list(ADAPTER.evaluate_batch(ctx))
    video = Path(record["extra"]["video"])
    assert video.parent == tmp_path / "batches" / "videos" and video.name.startswith("trial000-")
    expected = 1 + 10 + record["steps"]  # first frame, 10 wait steps, the rollout's steps
    assert record["extra"]["video_frames"] == expected
    assert count_frames(video) == (expected, (128, 128))
    assert not list(video.parent.glob(".*tmp*")), "no temporary file left behind"

    sent = policy.requests[0]
    sample = ADAPTER.sample_observation(settings, REF, manifest).observation
    bench = tagged_request(RequestSource("libero", SUITE, str(TASK)), 0, 0, sample)

    def layout(request: dict[str, Any]) -> dict[str, Any]:
        return {
            k: (v.dtype.str, v.shape) if isinstance(v, np.ndarray) else type(v).__name__ for k, v in request.items()
        }

    assert layout(bench) == layout(sent)
    assert bench["prompt"] == sent["prompt"]
