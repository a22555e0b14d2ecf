"""Measure LIBERO on this machine; the numbers in docs/libero.md and docs/performance.md come from here. A
measurement command, not part of the benchmark: it runs in LIBERO's interpreter, which imports this checkout.

  .venv-libero/bin/python scripts/bench_libero.py timings [--steps N]    env creation, reset, s/step per suite,
                                                                         one episode bare vs through the harness
                                                                         + websocket policy
  .venv-libero/bin/python scripts/bench_libero.py rng-probe [--tasks all] does anything but env.reset() move
                                                                         numpy's global RNG (set_init_state, wait
                                                                         steps, rollout steps)?

Run one at a time: each is CPU-bound (llvmpipe rendering).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from evalwf.contract.loopback import free_port


class _RecordingPolicy:
    """Wraps a policy: records the action chunks and the time spent in infer()."""

    def __init__(self, policy: Any):
        self.policy, self.chunks, self.infer_s, self.cpu_s = policy, [], 0.0, 0.0

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        reply = self.policy.infer(observation)
        self.infer_s += time.monotonic() - started
        self.chunks.append(np.asarray(reply["actions"]))
        return reply


def suite_step_times(steps: int, suites: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Per suite (task 0): env creation, reset + set_init_state, median seconds per step (256 px, 2 cameras)."""
    from benchmarks.libero import env as libero_env
    from benchmarks.libero.init_states import load_init_states
    from benchmarks.libero.suites import DUMMY_ACTION, SUITES

    out = {}
    rng = np.random.default_rng(0)
    for suite in suites or SUITES:
        spec = libero_env.task_spec(suite, 0)
        init_states = load_init_states(spec.init_states_file)
        t0 = time.monotonic()
        env = libero_env.make_env(spec, libero_env.ENV_RESOLUTION)
        t1 = time.monotonic()
        try:
            env.seed(7)
            env.reset()
            env.set_init_state(init_states[0])
            t2 = time.monotonic()
            for _ in range(10):
                env.step(list(DUMMY_ACTION))
            per_step = []
            for _ in range(steps):
                action = np.append(rng.uniform(-0.3, 0.3, 6), -1.0)
                started = time.monotonic()
                env.step(action.tolist())
                per_step.append(time.monotonic() - started)
        finally:
            libero_env.close_env(env)
        out[suite] = {
            "env_creation_s": t1 - t0,
            "reset_and_init_state_s": t2 - t1,
            "median_step_s": statistics.median(per_step),
        }
        print(
            f"{suite:15s} create {t1 - t0:5.1f}s  reset+init {t2 - t1:4.1f}s  "
            f"median step {statistics.median(per_step):.3f}s ({steps} steps)",
            flush=True,
        )
    return out


def physics_step_time(steps: int) -> float:
    """Seconds per step without rendering (cameras off): the physics + controller share of a step."""
    from libero.libero.envs import OffScreenRenderEnv

    from benchmarks.libero import env as libero_env
    from benchmarks.libero.suites import DUMMY_ACTION

    spec = libero_env.task_spec("libero_spatial", 0)
    env = OffScreenRenderEnv(bddl_file_name=str(spec.bddl_file), use_camera_obs=False)
    try:
        env.seed(7)
        env.reset()
        started = time.monotonic()
        for _ in range(steps):
            env.step(list(DUMMY_ACTION))
        return (time.monotonic() - started) / steps
    finally:
        libero_env.close_env(env)


def episode_bare_vs_harness(max_steps: int | None, rounds: int) -> dict[str, Any]:
    """One libero_spatial task 0 trial 0 episode through the harness (adapter + stand-in policy server over the
    websocket + the workflow's client), and the same episode (the same actions) on the bare simulator, both
    including env creation; alternated `rounds` times so that machine load and warm-up affect both alike."""
    from benchmarks.libero import env as libero_env
    from benchmarks.libero.init_states import load_init_states
    from benchmarks.libero.suites import DUMMY_ACTION
    from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter
    from evalwf.benchmark.batches import EpisodeRange
    from evalwf.plan.config import validate_section
    from evalwf.policy.client import PolicyClient

    # the same validation (and schema defaults) as a campaign's section
    section = {"episodes_per_task": 1, "batch_size": 1, "suites": {"libero_spatial": [0]}, "max_steps": max_steps}
    cfg = benchmark_settings("libero", validate_section("libero", section))
    adapter = get_adapter("libero")
    ref = TaskRef("libero", "libero_spatial", "0")
    definition = adapter.manifest_definition(cfg, "libero_spatial", "0")
    manifest = {"definition": definition, "episodes": adapter.build_manifest(definition, log=lambda _m: None).episodes}
    spec = libero_env.task_spec("libero_spatial", 0)
    init_states = load_init_states(spec.init_states_file)

    def harness() -> tuple[float, dict[str, Any], _RecordingPolicy]:
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.standin.policy_server", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with PolicyClient(f"ws://127.0.0.1:{port}") as client, tempfile.TemporaryDirectory() as tmp:
                policy = _RecordingPolicy(client)
                ctx = BatchContext(ref, EpisodeRange(0, 1), manifest, cfg, policy, Path(tmp), log=lambda _m: None)
                started, cpu_started = time.monotonic(), time.process_time()
                [record] = list(adapter.evaluate_batch(ctx))
                policy.cpu_s = time.process_time() - cpu_started
                return time.monotonic() - started, record, policy
        finally:
            server.terminate()
            server.wait(timeout=10)

    def bare(actions: list[np.ndarray]) -> dict[str, float]:
        t0, cpu0 = time.monotonic(), time.process_time()
        env = libero_env.make_env(spec, cfg.camera_size)
        try:
            t1 = time.monotonic()
            env.seed(cfg.seed)  # as the harness run
            env.reset()
            env.set_init_state(init_states[0])
            t2 = time.monotonic()
            for _ in range(cfg.num_wait_steps):
                env.step(list(DUMMY_ACTION))
            for action in actions:
                env.step(action.tolist())
            t3 = time.monotonic()
        finally:
            libero_env.close_env(env)
        return {
            "total_s": time.monotonic() - t0,
            "cpu_s": time.process_time() - cpu0,
            "create_s": t1 - t0,
            "reset_s": t2 - t1,
            "steps_s": t3 - t2,
        }

    harness_runs, harness_cpu, bare_runs = [], [], []
    for round_index in range(rounds):
        harness_s, record, policy = harness()
        actions = [a for chunk in policy.chunks for a in chunk[: cfg.replan_steps]][: record["steps"]]
        bare_run = bare(actions)
        harness_runs.append(harness_s)
        harness_cpu.append(policy.cpu_s)
        bare_runs.append(bare_run)
        print(
            f"  round {round_index + 1}: harness {harness_s:.1f}s, CPU {policy.cpu_s:.1f}s ({len(policy.chunks)} "
            f"policy calls, {policy.infer_s:.2f}s in infer), bare {bare_run['total_s']:.1f}s, CPU "
            f"{bare_run['cpu_s']:.1f}s (create {bare_run['create_s']:.1f}s, "
            f"reset+init {bare_run['reset_s']:.1f}s, {record['steps'] + 10} steps {bare_run['steps_s']:.1f}s)",
            flush=True,
        )
    harness_s = statistics.median(harness_runs)
    bare_s = statistics.median(r["total_s"] for r in bare_runs)
    harness_cpu_s = statistics.median(harness_cpu)
    bare_cpu_s = statistics.median(r["cpu_s"] for r in bare_runs)
    result = {
        "steps": record["steps"],
        "success": record["success"],
        "harness_s": harness_s,
        "bare_s": bare_s,
        "bare_runs": bare_runs,
        "harness_runs": harness_runs,
        "overhead_s": harness_s - bare_s,
        "overhead_pct": 100 * (harness_s - bare_s) / bare_s,
        "harness_cpu_s": harness_cpu_s,
        "bare_cpu_s": bare_cpu_s,
        "overhead_cpu_s": harness_cpu_s - bare_cpu_s,
        "overhead_cpu_pct": 100 * (harness_cpu_s - bare_cpu_s) / bare_cpu_s,
        "policy_calls": len(policy.chunks),
    }
    print(
        f"episode libero_spatial/0 trial 0, {record['steps']} steps + 10 wait, incl. env creation (median of "
        f"{rounds}): harness {harness_s:.1f}s, bare simulator {bare_s:.1f}s, overhead {result['overhead_s']:.1f}s "
        f"({result['overhead_pct']:.1f}%); CPU time harness {harness_cpu_s:.1f}s, bare {bare_cpu_s:.1f}s, "
        f"overhead {result['overhead_cpu_s']:.1f}s ({result['overhead_cpu_pct']:.1f}%)",
        flush=True,
    )
    return result


def rng_probe(tasks: str, steps: int, camera_size: int) -> dict[str, Any]:
    """For each task: seed, reset, then check whether set_init_state, 10 wait steps and `steps` random steps
    move numpy's global RNG."""
    from benchmarks.libero import env as libero_env
    from benchmarks.libero.init_states import load_init_states
    from benchmarks.libero.rng_states import global_state_digest
    from benchmarks.libero.suites import DUMMY_ACTION, SUITES

    rng = np.random.default_rng(0)
    report: dict[str, Any] = {"tasks": 0, "moved": []}
    for suite, info in SUITES.items():
        ids = range(info.num_tasks) if tasks == "all" else range(min(int(tasks), info.num_tasks))
        for task_id in ids:
            spec = libero_env.task_spec(suite, task_id)
            init_states = load_init_states(spec.init_states_file)
            env = libero_env.make_env(spec, camera_size)
            try:
                env.seed(7)
                for trial in range(2):
                    env.reset()
                    after_reset = global_state_digest()
                    env.set_init_state(init_states[trial])
                    moved_init = global_state_digest() != after_reset
                    for _ in range(10):
                        env.step(list(DUMMY_ACTION))
                    for _ in range(steps):
                        grip = 1.0 if rng.random() < 0.5 else -1.0
                        env.step(np.append(rng.uniform(-1, 1, 6), grip).tolist())
                    moved = global_state_digest() != after_reset
                    if moved or moved_init:
                        report["moved"].append(f"{suite}/{task_id} trial {trial}")
            finally:
                libero_env.close_env(env)
            report["tasks"] += 1
            print(
                f"{suite}/{task_id}: global RNG moved outside reset: "
                f"{any(m.startswith(f'{suite}/{task_id} ') for m in report['moved'])}",
                flush=True,
            )
    print(
        f"rng-probe: {report['tasks']} tasks x 2 trials x ({steps} random + 10 wait steps): "
        f"global RNG moved outside env.reset() in {len(report['moved'])} trials {report['moved']}"
    )
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    timings = sub.add_parser("timings")
    timings.add_argument("--steps", type=int, default=30, help="steps timed per suite")
    timings.add_argument("--episode-max-steps", type=int, default=None, help="default: the suite's (220)")
    timings.add_argument("--rounds", type=int, default=2, help="harness/bare alternations for the episode")
    timings.add_argument("--suites", nargs="+", help="suites to time steps on (default: all five)")
    timings.add_argument("--steps-only", action="store_true", help="skip the physics-only and episode timings")
    timings.add_argument("--json", type=Path, help="also write the numbers here")
    probe = sub.add_parser("rng-probe")
    probe.add_argument("--tasks", default="1", help="'all' or the number of tasks per suite")
    probe.add_argument("--steps", type=int, default=20)
    probe.add_argument("--camera-size", type=int, default=128)
    args = parser.parse_args(argv)

    print(
        f"LIBERO bench: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
        f"MUJOCO_GL={os.environ.get('MUJOCO_GL', 'egl (default)')}, "
        f"LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS', 'default')}",
        flush=True,
    )
    if args.command == "timings":
        numbers: dict[str, Any] = {"suites": suite_step_times(args.steps, args.suites)}
        if not args.steps_only:
            numbers["physics_only_step_s"] = physics_step_time(100)
            print(f"physics + controller only (no rendering): {numbers['physics_only_step_s']:.4f}s/step", flush=True)
            numbers["episode"] = episode_bare_vs_harness(args.episode_max_steps, args.rounds)
        if args.json:
            args.json.write_text(json.dumps(numbers, indent=2))
    else:
        rng_probe(args.tasks, args.steps, args.camera_size)


if __name__ == "__main__":
    main()
