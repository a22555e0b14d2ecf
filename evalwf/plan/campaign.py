"""A validated config expanded into tasks, manifests and batches: the single plan that the Snakefile, the
summariser and the status command all read, so they can never disagree about what a run contains."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalwf.benchmark.adapter import TaskRef, benchmark_settings, get_adapter
from evalwf.benchmark.batches import EpisodeRange
from evalwf.benchmark.settings import BenchmarkSettings
from evalwf.common.hashing import short_hash
from evalwf.plan.batch_sizes import plan_task_batches
from evalwf.plan.campaign_config import CampaignConfig, SectionDocument
from evalwf.plan.config import results_defining_settings
from evalwf.plan.environment import episode_environments, unavailable_reason
from evalwf.plan.manifest import manifest_hash
from evalwf.plan.results import BatchExpectation
from evalwf.policy.spec import PolicySpec

PLOT_APART_TASKS = 20  # a suite of more tasks, next to other suites, is plotted in a figure of its own


@dataclass(frozen=True)
class BatchPlan:
    ref: TaskRef
    episodes: EpisodeRange
    path: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What its rule's wildcards name: (benchmark, suite, task, batch label); PlannedTasks.batch_plan_of."""
        return (self.ref.benchmark, self.ref.suite, self.ref.task, self.episodes.label)


@dataclass(frozen=True)
class TaskPlan:
    ref: TaskRef
    scope: str
    definition: dict[str, Any] = field(hash=False, compare=False)
    manifest_hash: str
    manifest_path: str
    batches: tuple[BatchPlan, ...]

    @property
    def manifest_key(self) -> tuple[str, str, str, str]:
        """What its manifest rule's wildcards name: (benchmark, scope, task, digest); PlannedTasks.manifest_plan_of."""
        return (self.ref.benchmark, self.scope, self.ref.task, self.manifest_hash)

    @property
    def num_episodes(self) -> int:
        return sum(b.episodes.count for b in self.batches)


class PlannedTasks:
    """What a campaign and each of its policies share: the tasks of some benchmarks expanded from the config, their
    manifests (results/<run>/<benchmark>/manifests/..., shared by every policy, so that every policy of a benchmark
    meets the same episodes) and their batches, whose files go under `out`. Paths follow
    results/<run>/[<policy>/]<benchmark>/..., so a user can find any batch by name."""

    def __init__(
        self,
        config: CampaignConfig,
        benchmarks: list[str],
        out: Path,
        settings: dict[str, BenchmarkSettings],
        environments: dict[str, dict[str, Any] | None],
        planned: list[TaskPlan] | None = None,
    ):
        self.config = config
        self.run: str = config.run
        self.root = Path(config.results_dir) / self.run
        self.out = out
        self._benchmarks = benchmarks
        self._settings = settings
        # What of each benchmark's environment defines its episodes, read on this host (evalwf.plan.environment)
        self.environments = environments
        self.tasks: list[TaskPlan] = (
            planned if planned is not None else [p for b in benchmarks for p in self._plan_benchmark(b)]
        )
        self._by_ref = {plan.ref: plan for plan in self.tasks}
        self._by_batch = {batch.key: batch for plan in self.tasks for batch in plan.batches}
        self._by_manifest: dict[tuple[str, str, str, str], TaskPlan] = {}
        for plan in self.tasks:  # several suites may share a manifest: the first plan defines it (as `manifests`)
            self._by_manifest.setdefault(plan.manifest_key, plan)

    def _plan_benchmark(self, benchmark: str) -> Iterator[TaskPlan]:
        adapter = get_adapter(benchmark)
        settings = self.settings(benchmark)
        refs = list(adapter.expand(settings))
        ranges = plan_task_batches(adapter, settings, self.section(benchmark), refs)
        for ref in refs:
            scope = adapter.manifest_scope(ref.suite)
            definition = adapter.manifest_definition(settings, scope, ref.task)
            if self.environments[benchmark] is not None:
                definition["environment"] = self.environments[benchmark]
            digest = manifest_hash(definition)
            batches = tuple(BatchPlan(ref, rng, self.batch_path(ref, rng)) for rng in ranges[ref])
            yield TaskPlan(
                ref, scope, definition, digest, self.manifest_path(benchmark, scope, ref.task, digest), batches
            )

    def environment_unavailable(self, benchmark: str) -> str | None:
        """Why the environment defining `benchmark`'s episodes cannot be read on this host (None: it can). Its
        manifest names then stand for nothing: plan and dry-run, but run no job."""
        return unavailable_reason(self.environments[benchmark])

    def benchmark_dir(self, benchmark: str) -> Path:
        """Batches, summaries, logs and artifacts: under the policy's folder for a member of several policies."""
        return self.out / benchmark

    def manifest_path(self, benchmark: str, scope: str, task: str, digest: str) -> str:
        return str(self.root / benchmark / "manifests" / scope / f"{task}.{digest}.json")

    def batch_path(self, ref: TaskRef, episodes: EpisodeRange) -> str:
        return self.batch_path_of(ref.benchmark, ref.suite, ref.task, episodes.label)

    def batch_path_of(self, benchmark: str, suite: str, task: str, label: str) -> str:
        return str(self.benchmark_dir(benchmark) / "batches" / suite / task / f"{label}.json")

    def settings_digest(self, benchmark: str) -> str:
        """What in a benchmark's section shapes its episodes' outcomes (step limits, observation mapping, ...):
        batch jobs carry it as a param, so changing it reruns them and changing anything else does not."""
        return short_hash(results_defining_settings(benchmark, self.section(benchmark)))

    def batch_plan_of(self, benchmark: str, suite: str, task: str, label: str) -> BatchPlan:
        """The planned batch behind a batch job's wildcards (BatchPlan.key); KeyError when the plan has none."""
        batch = self._by_batch.get((benchmark, suite, task, label))
        if batch is None:
            raise KeyError(f"{benchmark}/{suite}/{task}: no planned batch {label}")
        return batch

    def manifest_plan_of(self, benchmark: str, scope: str, task: str, digest: str) -> TaskPlan | None:
        """The task plan that defines the manifest behind a manifest job's wildcards (TaskPlan.manifest_key); None
        when the plan has none."""
        return self._by_manifest.get((benchmark, scope, task, digest))

    def _digest(self, benchmark: str | None, policy: Any) -> str:
        """A hash of everything that defines the results (of one benchmark, or of all of them): the policy
        identity (`policy`), each task's manifest digest and batches, the reference scores."""
        plans = [plan for plan in self.tasks if benchmark in (None, plan.ref.benchmark)]
        return short_hash(
            {
                "run": self.run,
                "policy": policy,
                "settings": {name: self.settings_digest(name) for name in self.benchmarks if benchmark in (None, name)},
                "tasks": [
                    [plan.ref.benchmark, plan.ref.suite, plan.ref.task, plan.manifest_hash]
                    + [batch.episodes.label for batch in plan.batches]
                    for plan in plans
                ],
                "reference": self.config.reference_block(),  # the document's, as written: the digest stays
            }
        )

    @property
    def benchmarks(self) -> list[str]:
        """The benchmarks planned here (a member of several policies: those of its policy)."""
        return list(self._benchmarks)

    def comparison_dir(self, benchmark: str) -> Path:
        """Where the comparison across the policies of `benchmark` and an adaptive sweep's round decisions go
        (one place for the campaign and each of its policies: a job step of one policy reads the decisions)."""
        return self.root / "comparison" / benchmark

    def section(self, benchmark: str) -> SectionDocument:
        """The benchmark's validated section without the policies it may name: what is hashed and handed over to
        a job step (which makes its settings of it again)."""
        return self.config.section_settings(benchmark)

    def settings(self, benchmark: str) -> BenchmarkSettings:
        """The benchmark's typed settings: what its adapter reads."""
        return self._settings[benchmark]

    def task_plan(self, benchmark: str, suite: str, task: str) -> TaskPlan:
        return self._by_ref[TaskRef(benchmark, suite, task)]

    def tasks_of(self, benchmark: str) -> list[TaskPlan]:
        return [plan for plan in self.tasks if plan.ref.benchmark == benchmark]

    def batches(self, benchmark: str | None = None) -> list[BatchPlan]:
        return [b for plan in self.tasks if benchmark in (None, plan.ref.benchmark) for b in plan.batches]

    def manifests(self, benchmark: str | None = None) -> dict[str, TaskPlan]:
        """Unique manifest paths (several suites may share one) -> a task plan that defines it."""
        found: dict[str, TaskPlan] = {}
        for plan in self.tasks:
            if benchmark in (None, plan.ref.benchmark):
                found.setdefault(plan.manifest_path, plan)
        return found

    def reference_scores(self, benchmark: str) -> dict[str, float]:
        return self.config.reference_scores(benchmark)


class PolicyCampaign(PlannedTasks):
    """One policy of a campaign and the benchmarks it evaluates: its batches, summaries and logs go to
    results/<run>/<policy>/<benchmark>/ in a campaign of several policies, results/<run>/<benchmark>/ otherwise."""

    def __init__(self, campaign: Campaign, policy: PolicySpec, out: Path, planned: list[TaskPlan] | None = None):
        benchmarks = [name for name in campaign.benchmarks if policy.name in campaign.assignment[name]]
        self.policy = policy
        super().__init__(campaign.config, benchmarks, out, campaign._settings, campaign.environments, planned)

    def results_digest(self, benchmark: str | None = None) -> str:
        """What defines this policy's results (of one benchmark, or of all it evaluates): its gather rules carry
        it as a param, so they rerun when results change meaning and never for an operational setting."""
        return self._digest(benchmark, self.policy.identity)

    def summary_paths(self, benchmark: str) -> dict[str, str]:
        """What the gather step writes: tables (CSV, Markdown, LaTeX), a plot, and the reference comparison when
        scores are given. The single list of summary outputs: the gather rule declares exactly these."""
        directory = self.benchmark_dir(benchmark)
        paths = {
            "tasks": str(directory / "task_summary.csv"),
            "suites": str(directory / get_adapter(benchmark).summary_file),
            "markdown": str(directory / "summary.md"),
            "latex": str(directory / "summary.tex"),
            "plot": str(directory / "success_by_task.png"),
            "html": str(directory / "summary.html"),  # tables + plot inlined: the report's landing page shows it
        }
        if self.reference_scores(benchmark):
            paths["reference"] = str(directory / "reference_comparison.csv")
        for suite, key in self.suites_plotted_apart(benchmark).items():
            paths[key] = str(directory / f"success_by_task.{suite}.png")
        return paths

    def suites_plotted_apart(self, benchmark: str) -> dict[str, str]:
        """Suite -> its summary key ('plot_<suite>'), for the suites of more than PLOT_APART_TASKS tasks of a
        benchmark of several suites: their bars get a figure of their own (LIBERO's libero_90), so that the others'
        stay in view."""
        counts: dict[str, int] = {}
        for plan in self.tasks_of(benchmark):
            counts[plan.ref.suite] = counts.get(plan.ref.suite, 0) + 1
        if len(counts) < 2:
            return {}
        return {suite: "plot_" + re.sub(r"\W", "_", suite) for suite, n in counts.items() if n > PLOT_APART_TASKS}

    def expectation(self, batch: BatchPlan, manifest: dict[str, Any]) -> BatchExpectation:
        """What the result file of `batch` must contain to count (checked before any aggregation)."""
        adapter = get_adapter(batch.ref.benchmark)
        return BatchExpectation(
            batch.ref.benchmark,
            batch.ref.suite,
            batch.ref.task,
            batch.episodes,
            manifest,
            self.policy.identity,
            adapter.record_setup_keys,
        )


class Campaign(PlannedTasks):
    """The campaign a config defines: every benchmark's tasks and manifests, and its policies (`members`), one
    PolicyCampaign each, planning the benchmarks that policy evaluates. A campaign of several policies (a `policies`
    list, or different policies for different benchmarks) writes each policy's batches and summaries to
    results/<run>/<policy>/<benchmark>/ and compares the policies of a benchmark in results/<run>/comparison/; a
    campaign of one policy writes to results/<run>/<benchmark>/. The campaign is no policy itself: ask its members
    (`member`, `baseline`, `single`)."""

    def __init__(self, config: CampaignConfig):
        benchmarks = list(config.benchmarks)
        # benchmark -> the names of the policies that evaluate it, in config order
        self.assignment: dict[str, list[str]] = config.benchmark_policies()
        settings = {name: benchmark_settings(name, config.section_settings(name)) for name in benchmarks}
        root = Path(config.results_dir) / config.run
        super().__init__(config, benchmarks, root, settings, episode_environments(settings))
        policies = list(config.policies)
        self.multi = config.several_policies
        # a campaign of one policy plans its tasks once: its member's are the campaign's
        self.members: dict[str, PolicyCampaign] = {
            spec.name: PolicyCampaign(self, spec, root / spec.name)
            if self.multi
            else PolicyCampaign(self, spec, root, self.tasks)
            for spec in policies
        }
        self.baseline = self.members[config.baseline]

    def member(self, policy: str) -> PolicyCampaign:
        """The campaign of one of its policies, by name."""
        return self.members[policy]

    def single(self) -> PolicyCampaign:
        """The campaign of its one policy; for several, say so (ask `member` by name, or `baseline`)."""
        if self.multi:
            raise ValueError(f"campaign {self.run} has several policies ({', '.join(self.members)}): name one")
        return next(iter(self.members.values()))

    def policy_campaigns(self) -> list[PolicyCampaign]:
        """One campaign per policy, in config order."""
        return list(self.members.values())

    def policies_of(self, benchmark: str) -> list[PolicyCampaign]:
        """The campaigns of the policies that evaluate `benchmark`, in config order."""
        return [self.member(name) for name in self.assignment[benchmark]]

    def baseline_of(self, benchmark: str) -> str:
        """The policy the others are compared with on `benchmark` (CampaignConfig.benchmark_baseline)."""
        return self.config.benchmark_baseline(benchmark)

    def compared_benchmarks(self) -> list[str]:
        """The benchmarks that two or more policies evaluate: each gets a comparison across its policies."""
        return [name for name in self.benchmarks if len(self.assignment[name]) > 1]

    def comparison_paths(self, benchmark: str) -> dict[str, str]:
        """What the comparison across the policies of `benchmark` writes (see compared_benchmarks)."""
        directory = self.comparison_dir(benchmark)
        return {
            "suites": str(directory / "policy_comparison.csv"),
            "tasks": str(directory / "policy_comparison_tasks.csv"),
            "markdown": str(directory / "policy_comparison.md"),
            "plot": str(directory / "success_by_policy.png"),
        }

    def results_digest(self, benchmark: str | None = None) -> str:
        """What defines the results of the whole run (or of one benchmark: its comparison): the identity of every
        policy that evaluates it (several policies) or of the one policy, each task's manifest digest and batches,
        the reference scores. Gather rules carry it as a param."""
        if not self.multi:
            return self._digest(benchmark, self.single().policy.identity)
        evaluating = self.members if benchmark is None else {m.policy.name: m for m in self.policies_of(benchmark)}
        return self._digest(benchmark, {name: m.policy.identity for name, m in evaluating.items()})
