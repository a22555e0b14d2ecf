"""The one interface every benchmark implements; everything else (batches, manifests, results, aggregation,
policy client, scheduling) is shared and lives in the other parts of evalwf.

Adapter modules must import without their simulator: the Snakefile imports them at parse time to expand the
config into tasks and manifest identities. Import simulators lazily inside build_manifest / evaluate_batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic

from benchmarks import registry
from evalwf.benchmark.batches import EpisodeRange
from evalwf.benchmark.node_checks import NodeCheck
from evalwf.benchmark.records import EpisodeRecord, Manifest, ManifestEpisode, Policy, PolicyMessage
from evalwf.benchmark.settings import BenchmarkSettings, SettingsT
from evalwf.common.json_types import JsonObject
from evalwf.policy.episode_identity import EpisodeTag


@dataclass(frozen=True, order=True)
class TaskRef:
    """One evaluated task: suite is a LIBERO suite, a RoboTwin '<task_config>-<instruction_type>' setting, ..."""

    benchmark: str
    suite: str
    task: str


@dataclass
class ManifestBody:
    """What build_manifest returns: one ManifestEpisode per episode (index, seed, setup fields) plus free-form extra
    (e.g. RoboTwin's skipped seeds with reasons)."""

    episodes: list[ManifestEpisode]
    extra: JsonObject = field(default_factory=dict)


@dataclass
class BatchContext(Generic[SettingsT]):
    """Everything an adapter needs to evaluate episodes [start, start+count) of one task."""

    ref: TaskRef
    episodes: EpisodeRange
    manifest: Manifest  # the sealed manifest (see evalwf.plan.manifest)
    settings: SettingsT  # this benchmark's settings (its adapter's settings_class)
    policy: Policy[PolicyMessage]  # evalwf.policy.client.PolicyClient
    artifacts_dir: Path  # per-run scratch for optional artifacts (videos, fault markers): <run>/<bench>/artifacts
    log: Callable[[str], None] = print
    video_dir: Path | None = None  # rollout videos of this batch (record_video): next to its result file

    def manifest_episode(self, index: int) -> ManifestEpisode:
        return self.manifest["episodes"][index]

    def episode_tag(self, index: int, seed: int) -> EpisodeTag:
        """The identity every policy request of episode `index` carries (evalwf.policy.episode_identity): pass
        `tag.policy(ctx.policy)` as the policy and `tag` to chunked_rollout."""
        return episode_tag(self.ref, index, seed)


def episode_tag(ref: TaskRef, index: int, seed: int) -> EpisodeTag:
    """The episode key of every request episode `index` of task `ref` sends: the one definition behind a batch's
    requests (BatchContext.episode_tag) and `evalwf policy check`'s, so that the check sends what a campaign does."""
    return EpisodeTag(ref.benchmark, ref.suite, ref.task, index, int(seed))


@dataclass
class SampleObservation:
    """One policy request in exactly a benchmark's format (keys, shapes, dtypes; synthetic content, made without the
    simulator) and the action dimension the benchmark executes: what `evalwf policy check` sends and expects."""

    observation: PolicyMessage
    action_dim: int
    min_horizon: int = 1  # the benchmark executes this many actions of each chunk (replan_steps)
    extra_dims_ok: bool = False  # the benchmark uses the first action_dim values of longer actions


@dataclass(frozen=True)
class CostFigures:
    """What the cost estimate assumes of a benchmark nothing of which was measured yet (evalwf.plan.cost): seconds
    per step (simulator and policy inference through a loaded worker), per episode reset, per manifest build.
    Chosen at the top of what was measured, so that an estimate before any run errs long (docs/performance.md)."""

    step_s: float
    reset_s: float
    manifest_s: float


class BenchmarkAdapter(ABC, Generic[SettingsT]):
    """A benchmark: how its config expands into tasks, how its episodes are fixed, how a batch runs.

    The registry makes the one instance of each benchmark's adapter class, named by its registry key
    (benchmarks.registry.adapter): the name is never written twice. Every method that reads the benchmark's
    config takes its typed settings (`settings_class`, built by benchmark_settings)."""

    # The frozen dataclass of this benchmark's settings (benchmarks/<name>/settings.py), one field per schema key.
    settings_class: type[SettingsT]
    # Manifest episode fields every per-episode record must echo in record["setup"]; the result validator
    # checks them against the manifest (e.g. LIBERO init_state_index, RoboTwin instruction text).
    record_setup_keys: ClassVar[tuple[str, ...]] = ()
    # The benchmark-level summary CSV (LIBERO: per suite; RoboTwin: per task config and instruction type).
    summary_file: ClassVar[str] = "suite_summary.csv"
    # GPUs a manifest job needs (RoboTwin's expert check runs the simulator; the others need none).
    manifest_gpus: ClassVar[int] = 0
    # How to build the simulator environment that `benchmarks.<name>.python` names (said when it is missing).
    environment_setup: ClassVar[str] = "create that environment first"
    # Distributions of the simulator's environment whose versions shape the episodes (evalwf.plan.environment):
    # read in `benchmarks.<name>.python` and hashed into every manifest definition with that interpreter's Python
    # version, so that episodes found in one environment are never reused in another. Empty (and no checkout):
    # nothing is recorded, nothing probed.
    episode_packages: ClassVar[tuple[str, ...]] = ()
    # The cost estimate's figures before anything of the benchmark was measured (a benchmark that has none
    # measured: LIBERO's step through a loaded worker, a slow reset and manifest).
    cost_figures: ClassVar[CostFigures] = CostFigures(step_s=0.7, reset_s=5.0, manifest_s=600.0)

    def __init__(self, name: str):
        self.name = name  # the benchmark's registry key: TaskRef.benchmark, manifests, results and config keys

    @abstractmethod
    def expand(self, settings: SettingsT) -> list[TaskRef]:
        """Every configured (suite, task), from static tables only. Raise ConfigError on unknown names."""

    def known_suites(self) -> dict[str, int] | None:
        """Suite -> number of tasks this benchmark knows, from static tables (`evalwf benchmark list`); None where
        they are not known without the simulator."""
        return None

    def protocol_deviations(self, section: JsonObject) -> list[str]:
        """Why success rates under this config section are not comparable with the benchmark's published protocol
        (a shortened horizon, a toy simulator), each a phrase a user reads under the tables (`make demo`). `section`
        is the benchmark's section as the config file wrote it. Default: none."""
        return []

    def node_checks(self, settings: SettingsT) -> list[NodeCheck]:
        """What a node must have to run this benchmark's jobs (simulator packages, GPU, renderer, assets), each with
        its fix (evalwf.benchmark.node_checks). They run inside the benchmark's interpreter, with CUDA_VISIBLE_DEVICES
        as a worker sets it, for `evalwf doctor`, `evalwf benchmark check` and every worker before it takes a job of
        this benchmark (evalwf.job.node_probe), so they may import the simulator and render a frame. The
        framework checks the interpreter, the job code's import and the GPU id itself. Default: nothing more."""
        return []

    def renderer(self, settings: SettingsT) -> str | None:
        """What renders this benchmark's cameras on this node, as the simulator's own context names it (an EGL /
        OSMesa / Vulkan device, or llvmpipe): recorded in every batch result (evalwf.plan.batch_environment), so
        called once per batch, after its episodes, in the benchmark's interpreter; it may make a small context.
        None: the benchmark does not say (recorded with that reason); an error is recorded as the reason."""
        return None

    def checkout_identity(self, settings: SettingsT) -> str | None:
        """The version of the benchmark's own code checkout that shapes its episodes (RoboTwin: the commit of
        robotwin_root), read without importing it, cheaply (it is read at every parse); None when the benchmark has
        no checkout. Raises evalwf.common.errors.EnvironmentUnavailable when it cannot be read on this host."""
        return None

    def manifest_scope(self, suite: str) -> str:
        """Suites sharing a scope share manifests (RoboTwin: seen/unseen share the expert-checked seeds)."""
        return suite

    def describe_suite(self, suite: str) -> dict[str, str]:
        """Columns naming a suite in summaries (RoboTwin splits '<task_config>-<instruction_type>')."""
        return {"suite": suite}

    def task_instruction(self, task: str, manifest: Manifest | None) -> str:
        """What a task asks, in words, for the summaries and the plot (LIBERO: its language instruction).
        `manifest` is the task's sealed manifest, or None where it is not built yet. Default: the task name."""
        return task

    @abstractmethod
    def episode_step_limit(self, settings: SettingsT, ref: TaskRef) -> int:
        """The most simulator steps one episode of `ref` can take under this config: what a batch costs before
        any batch has been measured (evalwf.plan.cost). Static tables only, no simulator."""

    def recorded_step_limit(self, settings: SettingsT, ref: TaskRef) -> int:
        """The step limit as this benchmark's episode records count steps (their `steps` and `extra.max_steps`):
        what a measured step time is multiplied by. Default: episode_step_limit; a benchmark whose records leave
        out steps the limit counts (LIBERO's settle steps) says so here."""
        return self.episode_step_limit(settings, ref)

    @abstractmethod
    def manifest_definition(self, settings: SettingsT, scope: str, task: str) -> JsonObject:
        """Everything that defines the evaluated episodes of one task; its hash names the sealed manifest.
        Must be JSON-serialisable and cheap (no simulator)."""

    @abstractmethod
    def build_manifest(self, definition: JsonObject, log: Callable[[str], None] = print) -> ManifestBody:
        """Fix the episodes of one task (may run the simulator). Must not disturb the caller's global RNGs."""

    def sample_observation(
        self, settings: SettingsT, ref: TaskRef, manifest: Manifest | None = None
    ) -> SampleObservation:
        """A request for task `ref` as evaluate_batch would send it, built without the simulator (policy smoke check);
        `manifest` is the task's sealed manifest when it exists (its instruction text), else None."""
        raise NotImplementedError(f"{self.name}: no sample observation for the policy check")

    @abstractmethod
    def evaluate_batch(self, ctx: BatchContext[SettingsT]) -> Iterator[EpisodeRecord]:
        """Yield one record per episode in ctx.episodes, in index order (evalwf.benchmark.rollout.episode_record):
        its "setup" holds the manifest's value of each of record_setup_keys.
        Raise (with a message naming suite, task and episode) when the batch cannot complete."""


def get_adapter(benchmark: str) -> BenchmarkAdapter[Any]:
    """The adapter instance of a registered benchmark (benchmarks.registry); KeyError naming the known ones."""
    return registry.adapter(benchmark)


def benchmark_settings(benchmark: str, section: Mapping[str, Any]) -> BenchmarkSettings:
    """The typed settings of `benchmark` from its validated section (without campaign keys: policies, baseline):
    the one place they are built, wherever an adapter is called (the plan, the job step, the node checks)."""
    return get_adapter(benchmark).settings_class.from_section(section, f"benchmarks.{benchmark}")
