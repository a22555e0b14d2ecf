"""The LIBERO adapter: openpi's examples/libero protocol, evaluated batch by batch with identical results.

Per trial j of a task (as openpi's loop does it): restore the numpy global RNG state that the sequential loop has
before trial j's reset (recorded in the manifest, see rng_states.py), env.reset(), obs = set_init_state(init
state j), 10 wait steps of DUMMY_ACTION, then at most the suite's max steps: send openpi's observation, execute
replan_steps actions of each returned chunk, stop at the env's done (= success). One env per batch, reused
across its trials; a simulator error is retried once on a fresh env, then the batch fails naming the trial.

Module import stays simulator-free (the Snakefile imports adapters at parse time).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from benchmarks.libero.rng_states import EncodedRngState
from benchmarks.libero.settings import LiberoSettings
from benchmarks.libero.suites import (
    ACTION_DIM,
    DUMMY_ACTION,
    EPISODE_PACKAGES,
    LIBERO_VERSION,
    NUM_INIT_STATES,
    PROTOCOL,
    SUITES,
    effective_max_steps,
)
from evalwf.benchmark.adapter import (
    BatchContext,
    BenchmarkAdapter,
    CostFigures,
    ManifestBody,
    SampleObservation,
    TaskRef,
)
from evalwf.benchmark.node_checks import CheckFailed, NodeCheck
from evalwf.benchmark.records import EpisodeRecord, Manifest, ManifestEpisode, Policy, PolicyMessage
from evalwf.benchmark.rollout import chunked_rollout, episode_record
from evalwf.benchmark.seeds import preserved_global_rng
from evalwf.benchmark.video import save_episode_video
from evalwf.common.errors import ConfigError, ManifestError
from evalwf.common.json_types import JsonObject


class SimulatorError(RuntimeError):
    """The simulator (not the policy) failed during an episode."""


class LiberoEpisode(ManifestEpisode):
    """One trial of a LIBERO manifest: the init state it starts from and numpy's global RNG state before its reset."""

    init_state_index: int
    np_rng_state: EncodedRngState


class _CheckedPolicy:
    """Checks each action chunk as openpi's client does: [horizon >= replan_steps, 7]."""

    def __init__(self, policy: Policy[PolicyMessage], replan_steps: int, where: str):
        self.policy, self.replan_steps, self.where = policy, replan_steps, where

    def infer(self, observation: PolicyMessage) -> PolicyMessage:
        reply = self.policy.infer(observation)
        actions = np.asarray(reply["actions"])
        if actions.ndim != 2 or actions.shape[1] != ACTION_DIM or actions.shape[0] < self.replan_steps:
            raise ValueError(
                f"{self.where}: policy returned actions of shape {actions.shape}; LIBERO needs "
                f"[horizon >= replan_steps ({self.replan_steps}), {ACTION_DIM}]"
            )
        return {**reply, "actions": actions}


class _TrialRunner:
    """Runs trials of one task on one env, created on first use and replaced after a simulator error."""

    def __init__(self, ctx: BatchContext[LiberoSettings], spec: Any, init_states: np.ndarray, base_seed: int):
        self.ctx, self.spec, self.init_states, self.base_seed = ctx, spec, init_states, base_seed
        self.settings = ctx.settings
        self.max_steps = effective_max_steps(spec.suite, self.settings.max_steps)
        self.env: Any = None

    def where(self, index: int) -> str:
        return f"LIBERO {self.spec.suite} task {self.spec.task_id} trial {index}"

    def _sim(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # anything the simulator raises
            raise SimulatorError(f"{what}: {type(exc).__name__}: {exc}") from exc

    def _ensure_env(self) -> Any:
        if self.env is None:
            from benchmarks.libero import env as libero_env

            self.env = self._sim("env creation", lambda: libero_env.make_env(self.spec, self.settings.camera_size))
            self.env.seed(self.base_seed)  # openpi seeds each task env once; the manifest state overrides it
        return self.env

    def close(self) -> None:
        from benchmarks.libero import env as libero_env

        env, self.env = self.env, None
        try:
            libero_env.close_env(env)
        except Exception as exc:
            self.ctx.log(f"LIBERO: closing env failed (ignored): {exc}")

    def run(self, entry: LiberoEpisode) -> EpisodeRecord:
        """One trial, retried once on a fresh env after a simulator error."""
        index = entry["index"]
        try:
            return self._attempt(entry, retried_after=None)
        except SimulatorError as first:
            self.ctx.log(f"{self.where(index)}: simulator error, retrying on a fresh env: {first}")
            self.close()
            try:
                return self._attempt(entry, retried_after=str(first))
            except SimulatorError as second:
                self.close()
                raise RuntimeError(
                    f"{self.where(index)}: simulator failed twice (first: {first}; then: {second})"
                ) from second

    def _attempt(self, entry: LiberoEpisode, retried_after: str | None) -> EpisodeRecord:
        from benchmarks.libero.observation import openpi_observation, rotate_180
        from benchmarks.libero.rng_states import decode_state, global_state_digest

        index, init_index = entry["index"], entry["init_state_index"]
        settings, where = self.settings, self.where(index)
        frames: list[np.ndarray] = []
        with preserved_global_rng():  # the caller's global RNG is never consumed
            env = self._ensure_env()  # once per batch: its seconds count in the batch's, outside the episodes
            started = time.monotonic()
            np.random.set_state(decode_state(entry["np_rng_state"]))
            self._sim("env.reset", env.reset)
            after_reset = global_state_digest()
            obs = self._sim("set_init_state", lambda: env.set_init_state(self.init_states[init_index]))
            first_frame = np.ascontiguousarray(obs["agentview_image"])
            last = {"obs": obs}
            save_video = settings.record_video != "none"

            def step(action: Any) -> bool:
                result = self._sim("env.step", lambda: env.step(list(action)))
                last["obs"], _reward, done, _info = result
                if save_video:
                    frames.append(rotate_180(last["obs"]["agentview_image"]))
                return bool(done)

            if save_video:
                frames.append(rotate_180(first_frame))
            for _ in range(settings.num_wait_steps):
                step(DUMMY_ACTION)  # objects settle; not counted, success not checked (as openpi)
            reset_s = time.monotonic() - started  # reset, init state, settle: what the plan prices per episode
            tag = self.ctx.episode_tag(index, entry["seed"])
            outcome = chunked_rollout(
                _CheckedPolicy(tag.policy(self.ctx.policy), settings.replan_steps, where),
                lambda: openpi_observation(last["obs"], self.spec.language, settings.resize_size),
                lambda action: step(np.asarray(action, dtype=np.float64).tolist()),
                max_steps=self.max_steps,
                replan_steps=settings.replan_steps,
                tag=tag,
            )
            rollout_moved_rng = global_state_digest() != after_reset
        if rollout_moved_rng:
            self.ctx.log(
                f"{where}: WARNING: set_init_state/steps consumed numpy's global RNG; the sequential loop's "
                "later scenes would then depend on the policy (see docs/libero.md)"
            )
        extra: JsonObject = {
            "first_frame_sha256": hashlib.sha256(first_frame.tobytes()).hexdigest(),
            "max_steps": self.max_steps,
            "max_steps_override": settings.max_steps is not None,
            "np_rng_state_sha256": entry["np_rng_state"]["sha256"],
            "rollout_consumed_global_rng": rollout_moved_rng,
        }
        if retried_after:
            extra["retried_after_simulator_error"] = retried_after
        extra.update(save_episode_video(self.ctx, settings.record_video, f"trial{index:03d}", outcome.success, frames))
        return episode_record(
            index=index,
            seed=entry["seed"],
            setup={"init_state_index": init_index},
            success=outcome.success,
            steps=outcome.steps,
            duration_s=time.monotonic() - started,
            extra=extra,
            reset_s=reset_s,
        )


class LiberoAdapter(BenchmarkAdapter[LiberoSettings]):
    settings_class = LiberoSettings
    record_setup_keys = ("init_state_index",)
    environment_setup = "build it with scripts/setup_libero.sh (make libero-env)"
    # before anything is measured on this machine: 0.13-0.22 s per step bare, 0.85 s per policy step and 18 s of reset
    # + settle per trial through `make demo` on the loaded 2-core development machine (the 0.7 s / 2.5 s documented
    # before priced that demo at 0.48x); a manifest (50 sequential resets) 97 s per task (docs/performance.md,
    # "Cost estimate")
    cost_figures = CostFigures(step_s=1.0, reset_s=10.0, manifest_s=150.0)
    episode_packages = EPISODE_PACKAGES

    def expand(self, settings: LiberoSettings) -> list[TaskRef]:
        """Suite names, task id types, uniqueness and the 50 trials are the schema's; here only what it cannot
        say: a task id beyond its suite's task count."""
        refs = []
        for suite, tasks in settings.suites.items():
            count = SUITES[suite].num_tasks
            chosen = list(range(count)) if tasks == "all" else tasks
            bad = [t for t in chosen if t >= count]
            if bad:
                raise ConfigError(
                    f"invalid config: config key 'benchmarks.libero.suites.{suite}': unknown task id(s) "
                    f"{', '.join(map(repr, bad))}; {suite} has tasks 0..{count - 1}"
                )
            refs.extend(TaskRef(self.name, suite, str(task)) for task in chosen)
        return refs

    def known_suites(self) -> dict[str, int]:
        return {name: suite.num_tasks for name, suite in SUITES.items()}

    def protocol_deviations(self, section: JsonObject) -> list[str]:
        if section.get("max_steps") is None:
            return []
        limits = ", ".join(f"{suite} {effective_max_steps(suite, None)}" for suite in section.get("suites", {}))
        return [f"LIBERO's horizon is cut to {section['max_steps']} steps (openpi allows {limits}; 0 % is expected)"]

    def node_checks(self, settings: LiberoSettings) -> list[NodeCheck]:
        """The simulator's packages and config, its scene assets, and one frame rendered through EGL."""
        from benchmarks.libero import env as libero_env

        def simulator() -> str:
            reason = libero_env.unavailable_reason()  # finds the packages without importing them
            if reason:
                raise CheckFailed(reason)
            return ", ".join(f"{name} {version}" for name, version in libero_env.package_versions().items())

        egl_fix = (
            "LIBERO renders through EGL (MUJOCO_GL=egl): install libegl1 and the GPU's EGL vendor library (NVIDIA: "
            "libnvidia-gl; CPU: libegl-mesa0); __EGL_VENDOR_LIBRARY_FILENAMES, when set, must name it"
        )
        return [
            NodeCheck("simulator", simulator, libero_env.SETUP_HINT),
            NodeCheck("assets", libero_env.assets_found, libero_env.SETUP_HINT, needs=("simulator",)),
            NodeCheck("renderer", libero_env.render_one_frame, egl_fix, needs=("simulator",)),
        ]

    def renderer(self, settings: LiberoSettings) -> str:
        from benchmarks.libero import env as libero_env

        return libero_env.gl_renderer()

    def task_instruction(self, task: str, manifest: Manifest | None) -> str:
        """The task's language instruction, recorded in its sealed manifest (the simulator is not imported)."""
        extra = (manifest or {}).get("extra") or {}
        return str(extra.get("language") or f"task {task}")

    def episode_step_limit(self, settings: LiberoSettings, ref: TaskRef) -> int:
        # the wait steps are simulator steps too
        return effective_max_steps(ref.suite, settings.max_steps) + settings.num_wait_steps

    def recorded_step_limit(self, settings: LiberoSettings, ref: TaskRef) -> int:
        # a record's steps and extra.max_steps count the policy's steps; the settle steps are in its duration only
        return effective_max_steps(ref.suite, settings.max_steps)

    def manifest_definition(self, settings: LiberoSettings, scope: str, task: str) -> JsonObject:
        return {
            "benchmark": self.name,
            "suite": scope,
            "task_id": int(task),
            "num_trials": settings.episodes_per_task,
            "base_seed": settings.seed,
            "libero_version": LIBERO_VERSION,
            "protocol": PROTOCOL,
        }

    def build_manifest(self, definition: JsonObject, log: Callable[[str], None] = print) -> ManifestBody:
        from benchmarks.libero import env as libero_env
        from benchmarks.libero.rng_states import sequential_reset_states

        if definition.get("protocol") != PROTOCOL or definition.get("libero_version") != LIBERO_VERSION:
            raise ManifestError(
                f"LIBERO manifest definition is for {definition.get('libero_version')} / "
                f"{definition.get('protocol')}; this adapter implements {LIBERO_VERSION} / {PROTOCOL}"
            )
        suite, task_id = definition["suite"], definition["task_id"]
        num_trials, base_seed = definition["num_trials"], definition["base_seed"]
        if not 1 <= num_trials <= NUM_INIT_STATES:
            raise ManifestError(f"LIBERO {suite} task {task_id}: num_trials must be 1..{NUM_INIT_STATES}")
        spec = libero_env.task_spec(suite, task_id)
        states = sequential_reset_states(suite, task_id, base_seed, num_trials, log)
        episodes: list[ManifestEpisode] = [
            LiberoEpisode(index=j, seed=base_seed, init_state_index=j, np_rng_state=states[j])
            for j in range(num_trials)
        ]
        extra = {
            "task_name": spec.name,
            "language": spec.language,
            "np_rng_state": "numpy global RNG state just before trial j's env.reset() in openpi's loop "
            "(env.seed(base_seed) once, trials in order); restored before each reset",
        }
        return ManifestBody(episodes, extra)

    def sample_observation(
        self, settings: LiberoSettings, ref: TaskRef, manifest: Manifest | None = None
    ) -> SampleObservation:
        """openpi's LIBERO request, made by the same function as in evaluate_batch from a synthetic raw observation
        (blank cameras at camera_size, the robot at the origin): images, 8 state values, the task's instruction
        (from its manifest when built)."""
        from benchmarks.libero.observation import openpi_observation

        size = settings.camera_size
        raw = {
            "agentview_image": np.zeros((size, size, 3), np.uint8),
            "robot0_eye_in_hand_image": np.zeros((size, size, 3), np.uint8),
            "robot0_eef_pos": np.zeros(3),
            "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
            "robot0_gripper_qpos": np.zeros(2),
        }
        prompt = self.task_instruction(ref.task, manifest)
        observation = openpi_observation(raw, prompt, settings.resize_size)
        return SampleObservation(observation, ACTION_DIM, settings.replan_steps)

    def evaluate_batch(self, ctx: BatchContext[LiberoSettings]) -> Iterator[EpisodeRecord]:
        from benchmarks.libero import env as libero_env
        from benchmarks.libero.init_states import load_init_states

        ref = ctx.ref
        definition = ctx.manifest.get("definition", {})
        if (definition.get("suite"), definition.get("task_id")) != (ref.suite, int(ref.task)):
            raise ManifestError(
                f"LIBERO manifest is for {definition.get('suite')} task {definition.get('task_id')}, "
                f"not {ref.suite} task {ref.task}"
            )
        spec = libero_env.task_spec(ref.suite, int(ref.task))
        init_states = load_init_states(spec.init_states_file)
        runner = _TrialRunner(ctx, spec, init_states, definition["base_seed"])
        ctx.log(
            f"LIBERO {ref.suite} task {ref.task} ('{spec.language}'): trials {ctx.episodes.indices()}, "
            f"max_steps {runner.max_steps}"
        )
        try:
            for index in ctx.episodes.indices():
                entry = cast(LiberoEpisode, ctx.manifest_episode(index))
                if entry.get("index") != index or not 0 <= entry.get("init_state_index", -1) < len(init_states):
                    raise ManifestError(f"{runner.where(index)}: manifest entry {entry.get('index')} is invalid")
                yield runner.run(entry)  # the trial ran to completion (and restored the RNG) before this yield
        finally:
            runner.close()


Adapter = LiberoAdapter
