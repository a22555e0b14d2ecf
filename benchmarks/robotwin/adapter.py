"""The RoboTwin 2.0 adapter: suites are '<task_config>-<instruction_type>' (e.g. 'demo_clean-unseen'); the
seen and unseen suites of a task config share one sealed manifest (the expert-checked seeds, with both texts).

Imports no simulator: the RoboTwin checkout (benchmarks.robotwin.checkout) is imported only when a manifest is
built or a batch runs. See docs/robotwin.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from benchmarks.robotwin.checkout import RobotwinCheckout, checkout_identity, resolve_root, task_config_sha256
from benchmarks.robotwin.evaluator import RECORD_SETUP_KEYS, step_limit_override
from benchmarks.robotwin.protocols import by_identity, protocol
from benchmarks.robotwin.settings import RobotwinSettings
from benchmarks.robotwin.tasks import (
    INSTRUCTION_TYPES,
    PLAY_ONCE_STATE,
    TASK_CONFIGS,
    TASKS,
    split_suite,
    start_seed,
    step_limit,
    suite_name,
)
from evalwf.benchmark.adapter import (
    BatchContext,
    BenchmarkAdapter,
    CostFigures,
    ManifestBody,
    SampleObservation,
    TaskRef,
)
from evalwf.benchmark.node_checks import NodeCheck
from evalwf.benchmark.records import EpisodeRecord, Manifest
from evalwf.common.errors import ConfigError, EnvironmentUnavailable
from evalwf.common.json_types import JsonObject

MAX_SEED_SCAN = 10000  # upstream scans forever; a task whose expert fails this often is broken


class RobotwinAdapter(BenchmarkAdapter[RobotwinSettings]):
    settings_class = RobotwinSettings
    record_setup_keys = RECORD_SETUP_KEYS  # env_seed, instruction_seen, instruction_unseen
    summary_file = "benchmark_summary.csv"
    manifest_gpus = 1  # the expert check runs the simulator
    environment_setup = "build it with scripts/setup_robotwin.sh on the GPU node (docs/robotwin.md)"
    # not measured here (no GPU): SAPIEN's steps are slower than MuJoCo's, a manifest runs the expert on every seed
    cost_figures = CostFigures(step_s=1.0, reset_s=5.0, manifest_s=600.0)
    # The simulator, its planner, and what seeds and draws from them (setup_demo seeds numpy and torch).
    episode_packages = ("numpy", "sapien", "mplib", "torch")

    def expand(self, settings: RobotwinSettings) -> list[TaskRef]:
        """Task configs, instruction types and task names are the schema's enums: nothing left to check."""
        tasks = list(TASKS) if settings.tasks == "all" else settings.tasks
        return [
            TaskRef(self.name, suite_name(task_config, kind), task)
            for task_config in settings.task_configs
            for kind in self.instruction_types(settings, task_config)
            for task in tasks
        ]

    @staticmethod
    def instruction_types(settings: RobotwinSettings, task_config: str) -> tuple[str, ...]:
        """The configured instruction types, or the protocol's default for the task config: stable_2.0 unseen;
        main the task config's eval_instruction, read from the checkout where it is here (upstream's values
        otherwise, and a batch then checks them against the checkout)."""
        if settings.instruction_types:
            return tuple(settings.instruction_types)
        line = protocol(settings.protocol)
        root = resolve_root(settings.robotwin_root)
        if line.instruction_from_task_config and root is not None and root.is_dir():
            try:
                return (RobotwinCheckout(root, line.name).eval_instruction(task_config),)
            except ConfigError:
                pass  # a checkout that does not match: planned with upstream's value, refused when anything runs
        return (line.default_instruction[task_config],)

    def known_suites(self) -> dict[str, int]:
        return {suite_name(config, kind): len(TASKS) for config in TASK_CONFIGS for kind in INSTRUCTION_TYPES}

    def node_checks(self, settings: RobotwinSettings) -> list[NodeCheck]:
        """The checkout and its assets, upstream's packages and patches, a task module, CUDA and one SAPIEN frame
        (benchmarks.robotwin.env_check, which scripts/setup_robotwin.sh runs too)."""
        from benchmarks.robotwin.env_check import node_checks

        return node_checks(settings)

    def checkout_identity(self, settings: RobotwinSettings) -> str:
        """The commit of robotwin_root (or the hash of its code where it has no .git: the stand-in)."""
        root = resolve_root(settings.robotwin_root)
        if root is None:
            raise EnvironmentUnavailable(
                "config key 'benchmarks.robotwin.robotwin_root' is not set: name a RoboTwin stable_2.0 checkout "
                "(its commit is part of every manifest's name)"
            )
        return checkout_identity(root)

    def manifest_scope(self, suite: str) -> str:
        return split_suite(suite)[0]

    def describe_suite(self, suite: str) -> dict[str, str]:
        task_config, instruction_type = split_suite(suite)
        return {"task_config": task_config, "instruction_type": instruction_type}

    def episode_step_limit(self, settings: RobotwinSettings, ref: TaskRef) -> int:
        override = step_limit_override(settings, ref.task)
        return step_limit(ref.task) if override is None else override

    def manifest_definition(self, settings: RobotwinSettings, scope: str, task: str) -> JsonObject:
        root = settings.robotwin_root
        seed = settings.seed
        definition = {
            "benchmark": self.name,
            "protocol": protocol(settings.protocol).identity,  # upstream's line (the commit: "environment")
            "_robotwin_root": root,  # where the checkout is on this host: recorded, not hashed
            "_expert_check_workers": settings.expert_check_workers,  # how, not what: recorded, not hashed
            "task_config": scope,
            "task_config_sha256": task_config_sha256(root, scope, settings.protocol),  # None: no checkout here
            "task": task,
            "seed": seed,
            "start_seed": start_seed(seed),
            "num_episodes": settings.episodes_per_task,
            "instruction_list_length": settings.instruction_list_length,
            "instruction_types_stored": list(INSTRUCTION_TYPES),
            "instruction_rng": settings.instruction_rng,  # seeded (a private generator per episode) | upstream
        }
        if task in PLAY_ONCE_STATE:
            # Only these tasks' manifests carry (and hash) it: the other tasks' manifests and batches stay valid.
            definition["play_once_state"] = list(PLAY_ONCE_STATE[task])
        return definition

    def build_manifest(self, definition: JsonObject, log: Callable[[str], None] = print) -> ManifestBody:
        from benchmarks.robotwin.manifest_builder import build_task_manifest

        line = by_identity(definition.get("protocol"))
        checkout = RobotwinCheckout.from_config(
            definition["_robotwin_root"], f"building the RoboTwin manifest of {definition['task']}", line.name
        )
        current = task_config_sha256(definition["_robotwin_root"], definition["task_config"], line.name)
        if definition["task_config_sha256"] not in (None, current):
            raise ConfigError(
                f"RoboTwin task config {definition['task_config']}.yml changed since this manifest was planned "
                "(content hash differs); rerun snakemake to plan against the current file"
            )
        return build_task_manifest(checkout, definition, max_seed_scan=MAX_SEED_SCAN, log=log)

    def sample_observation(
        self, settings: RobotwinSettings, ref: TaskRef, manifest: Manifest | None = None
    ) -> SampleObservation:
        """The request the configured observation mapping builds from a synthetic RoboTwin observation (blank
        240x320 cameras as RoboTwin's default D435; zeros of the action dimension at the state path and at every
        extra path) with episode 0's instruction text when the manifest is built."""
        import numpy as np

        from benchmarks.robotwin.observation import PolicyMapping, RobotwinObservation

        mapping = PolicyMapping.from_settings(settings)
        dim = int(mapping.action["dim"])
        cameras = set(mapping.observation["images"].values())
        raw: RobotwinObservation = {"observation": {c: {"rgb": np.zeros((240, 320, 3), np.uint8)} for c in cameras}}
        for path in [mapping.observation["state_path"], *mapping.observation["extra"].values()]:
            *parents, leaf = path.split(".")
            node = raw
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = np.zeros(dim)
        _, instruction_type = split_suite(ref.suite)
        episodes = (manifest or {}).get("episodes") or [{}]
        instruction = str(episodes[0].get(f"instruction_{instruction_type}") or ref.task.replace("_", " "))
        replan = settings.replan_steps
        return SampleObservation(mapping.request(raw, instruction), dim, replan, extra_dims_ok=True)  # [:, :dim]

    def evaluate_batch(self, ctx: BatchContext[RobotwinSettings]) -> Iterator[EpisodeRecord]:
        from benchmarks.robotwin.evaluator import evaluate_task_batch

        checkout = RobotwinCheckout.from_config(
            ctx.settings.robotwin_root, f"evaluating RoboTwin {ctx.ref.suite}/{ctx.ref.task}", ctx.settings.protocol
        )
        yield from evaluate_task_batch(ctx, checkout)


Adapter = RobotwinAdapter
