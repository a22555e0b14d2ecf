"""The stand-in benchmark adapter: same interface and shared mechanics as LIBERO and RoboTwin."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from benchmarks.standin.settings import StandinSettings
from benchmarks.standin.sim import STATE_DIM, SUITES, StandinEpisode, episode_instruction, episode_seed
from evalwf.benchmark.adapter import (
    BatchContext,
    BenchmarkAdapter,
    CostFigures,
    ManifestBody,
    SampleObservation,
    TaskRef,
)
from evalwf.benchmark.records import EpisodeRecord, Manifest
from evalwf.benchmark.rollout import chunked_rollout, episode_record
from evalwf.benchmark.video import save_episode_video
from evalwf.common.errors import ConfigError
from evalwf.common.json_types import JsonObject


class StandinAdapter(BenchmarkAdapter[StandinSettings]):
    settings_class = StandinSettings
    record_setup_keys = ("instruction",)
    # no simulator: a step is a policy round trip (step_time_s, where set, emulates a simulator instead)
    cost_figures = CostFigures(step_s=0.01, reset_s=0.0, manifest_s=5.0)

    def renderer(self, settings: StandinSettings) -> str:
        """No GL or Vulkan: the stand-in draws its pictures with numpy (sim.StandinEpisode.frame)."""
        return "stand-in: numpy-drawn frames (no GL or Vulkan)"

    def expand(self, settings: StandinSettings) -> list[TaskRef]:
        refs = []
        for suite, tasks in settings.suites.items():
            if suite not in SUITES:
                raise ConfigError(
                    f"invalid config: config key 'benchmarks.{self.name}.suites.{suite}': unknown suite; "
                    f"known: {', '.join(SUITES)}"
                )
            chosen = SUITES[suite] if tasks == "all" else tasks
            unknown = [t for t in chosen if t not in SUITES[suite]]
            if unknown:
                raise ConfigError(
                    f"invalid config: config key 'benchmarks.{self.name}.suites.{suite}': unknown task(s) "
                    f"{', '.join(map(str, unknown))}; known: {', '.join(SUITES[suite])}"
                )
            refs.extend(TaskRef(self.name, suite, task) for task in chosen)
        return refs

    def known_suites(self) -> dict[str, int]:
        return {suite: len(tasks) for suite, tasks in SUITES.items()}

    def protocol_deviations(self, section: JsonObject) -> list[str]:
        return ["the stand-in benchmark is a toy simulator (its rates test the machinery only)"]

    def task_instruction(self, task: str, manifest: Manifest | None) -> str:
        """Episodes vary the colour and the phrasing (sim.INSTRUCTION_TEMPLATES); the task is the verb."""
        return f"{task} the coloured block"

    def episode_step_limit(self, settings: StandinSettings, ref: TaskRef) -> int:
        return settings.max_steps

    def manifest_definition(self, settings: StandinSettings, scope: str, task: str) -> JsonObject:
        return {
            "benchmark": self.name,
            "suite": scope,
            "task": task,
            "num_episodes": settings.episodes_per_task,
            "base_seed": settings.seed,
            "simulator": "standin-v1",
        }

    def build_manifest(self, definition: JsonObject, log: Callable[[str], None] = print) -> ManifestBody:
        episodes = []
        for index in range(definition["num_episodes"]):
            seed = episode_seed(definition["suite"], definition["task"], index, definition["base_seed"])
            episodes.append(
                {"index": index, "seed": seed, "instruction": episode_instruction(definition["task"], seed)}
            )
        return ManifestBody(episodes)

    def sample_observation(
        self, settings: StandinSettings, ref: TaskRef, manifest: Manifest | None = None
    ) -> SampleObservation:
        """Episode 0's first observation (the stand-in needs no simulator; it uses the first STATE_DIM values of
        each action)."""
        seed = episode_seed(ref.suite, ref.task, 0, settings.seed)
        episode = StandinEpisode(seed, episode_instruction(ref.task, seed), settings.tolerance, 0.0)
        return SampleObservation(episode.observation(), STATE_DIM, settings.replan_steps, extra_dims_ok=True)

    def evaluate_batch(self, ctx: BatchContext[StandinSettings]) -> Iterator[EpisodeRecord]:
        settings, ref = ctx.settings, ctx.ref
        faults = [f for f in settings.faults if f["task"] == ref.task and f.get("suite", ref.suite) == ref.suite]
        for fault in faults:
            if fault["kind"] == "slow_start":
                ctx.log(f"stand-in fault: slow start {fault['seconds']}s")
                time.sleep(fault["seconds"])
        step_time = settings.step_time_s["tasks"].get(ref.task, settings.step_time_s["default"])
        for index in ctx.episodes.indices():
            entry = ctx.manifest_episode(index)
            self._inject_episode_faults(faults, ref, index, ctx)
            started = time.monotonic()
            episode = StandinEpisode(entry["seed"], entry["instruction"], settings.tolerance, step_time)
            recording = settings.record_video != "none"
            frames = [episode.frame()] if recording else []

            def step(action: Any, episode: StandinEpisode = episode, frames: list = frames) -> bool:
                done = episode.step(action)
                if frames:
                    frames.append(episode.frame())
                return done

            tag = ctx.episode_tag(index, entry["seed"])
            outcome = chunked_rollout(
                tag.policy(ctx.policy),
                episode.observation,
                step,
                max_steps=settings.max_steps,
                replan_steps=settings.replan_steps,
                tag=tag,
            )
            extra: JsonObject = {"final_distance": float(abs(episode.state - episode.goal).max())}
            extra.update(save_episode_video(ctx, settings.record_video, f"episode{index:03d}", outcome.success, frames))
            yield episode_record(
                index=index,
                seed=entry["seed"],
                setup={"instruction": entry["instruction"]},
                success=outcome.success,
                steps=outcome.steps,
                duration_s=time.monotonic() - started,
                extra=extra,
            )

    @staticmethod
    def _inject_episode_faults(
        faults: list[Mapping[str, Any]], ref: TaskRef, index: int, ctx: BatchContext[StandinSettings]
    ) -> None:
        for fault in faults:
            if fault.get("episode") != index:
                continue
            where = f"stand-in suite {ref.suite}, task {ref.task}, episode {index}"
            if fault["kind"] == "raise":
                raise RuntimeError(f"injected simulator fault in {where}")
            if fault["kind"] == "raise_once":
                marker = ctx.artifacts_dir / "faults" / f"{ref.suite}.{ref.task}.{index}.raised"
                if not marker.exists():
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.touch()
                    raise RuntimeError(f"injected one-time simulator fault in {where}")
            if fault["kind"] == "hang":
                ctx.log(f"stand-in fault: hang {fault['seconds']}s in {where}")
                time.sleep(fault["seconds"])


Adapter = StandinAdapter
