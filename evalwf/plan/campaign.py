"""A validated config expanded into tasks, manifests and batches: the single plan that the Snakefile, the
summariser and the status command all read, so they can never disagree about what a run contains."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalwf.benchmark.adapter import TaskRef, get_adapter
from evalwf.benchmark.batches import EpisodeRange, plan_batches
from evalwf.common.hashing import short_hash
from evalwf.plan.config import (
    benchmark_policies,
    campaign_policy_blocks,
    results_defining_settings,
    section_settings,
    several_policies,
)
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


@dataclass(frozen=True)
class TaskPlan:
    ref: TaskRef
    scope: str
    definition: dict[str, Any] = field(hash=False, compare=False)
    manifest_hash: str
    manifest_path: str
    batches: tuple[BatchPlan, ...]

    @property
    def num_episodes(self) -> int:
        return sum(b.episodes.count for b in self.batches)


class Campaign:
    """Paths follow results/<run>/<benchmark>/{manifests,batches}/..., so a user can find any batch by name.

    A campaign of several policies (a `policies` list, or different policies for different benchmarks) is a
    campaign of members, one per policy, each a Campaign of its own that plans only the benchmarks its policy is
    assigned and whose batches and summaries go to results/<run>/<policy>/<benchmark>/...; the manifests (what
    defines the episodes) stay at results/<run>/<benchmark>/manifests/, shared, so every policy of a benchmark meets
    the same episodes. The campaign itself then stands for its baseline policy where one policy is asked for
    (`policy`), and plans every benchmark (its manifests)."""

    def __init__(self, config: dict[str, Any], member: str | None = None):
        self.config = config
        self.run: str = config["run"]
        self.root = Path(config["results_dir"]) / self.run
        self.members: dict[str, Campaign] = {}
        # benchmark -> the names of the policies that evaluate it, in config order
        self.assignment: dict[str, list[str]] = {
            benchmark: [block["name"] for block in blocks] for benchmark, blocks in benchmark_policies(config).items()
        }
        blocks = {block["name"]: block for block in campaign_policy_blocks(config)}
        benchmarks = list(config["benchmarks"])
        if member is not None:
            self.policy = PolicySpec.from_config(blocks[member])
            self.out = self.root / member
            benchmarks = [name for name in benchmarks if member in self.assignment[name]]
        elif several_policies(config):
            self.members = {name: Campaign(config, name) for name in blocks}
            self.baseline: str = config["baseline"]
            self.policy = self.members[self.baseline].policy
            self.out = self.root
        else:
            self.policy = PolicySpec.from_config(next(iter(blocks.values())))
            self.out = self.root
        self._benchmarks = benchmarks
        # What of each benchmark's environment defines its episodes, read on this host (evalwf.plan.environment)
        self.environments = episode_environments({name: self.section(name) for name in benchmarks})
        self.tasks: list[TaskPlan] = [
            plan for name in benchmarks for plan in self._plan_benchmark(name, self.section(name))
        ]
        self._by_ref = {plan.ref: plan for plan in self.tasks}

    def _plan_benchmark(self, benchmark: str, section: dict[str, Any]) -> Iterator[TaskPlan]:
        adapter = get_adapter(benchmark)
        for ref in adapter.expand(section):
            scope = adapter.manifest_scope(ref.suite)
            definition = adapter.manifest_definition(section, scope, ref.task)
            if self.environments[benchmark] is not None:
                definition["environment"] = self.environments[benchmark]
            digest = manifest_hash(definition)
            batches = tuple(
                BatchPlan(ref, rng, self.batch_path(ref, rng))
                for rng in plan_batches(section["episodes_per_task"], section["batch_size"])
            )
            yield TaskPlan(
                ref, scope, definition, digest, self.manifest_path(benchmark, scope, ref.task, digest), batches
            )

    def environment_unavailable(self, benchmark: str) -> str | None:
        """Why the environment defining `benchmark`'s episodes cannot be read on this host (None: it can). Its
        manifest names then stand for nothing: plan and dry-run, but run no job."""
        return unavailable_reason(self.environments[benchmark])

    @property
    def multi(self) -> bool:
        """Several policies (`policies`): the rules then plan each member's batches and summaries."""
        return bool(self.members)

    def member(self, policy: str) -> Campaign:
        """The campaign of one policy of several (this one when it has a single policy)."""
        return self.members[policy] if self.members else self

    def policy_campaigns(self) -> list[Campaign]:
        """One campaign per policy: the members, or this campaign itself."""
        return list(self.members.values()) or [self]

    def policies_of(self, benchmark: str) -> list[Campaign]:
        """The campaigns of the policies that evaluate `benchmark`, in config order."""
        return [self.member(name) for name in self.assignment[benchmark]] if self.members else [self]

    def baseline_of(self, benchmark: str) -> str:
        """The policy the others are compared with on `benchmark`: its section's `baseline`, else the campaign's
        when that policy evaluates it, else its first policy."""
        names = self.assignment[benchmark]
        chosen = self.config["benchmarks"][benchmark].get("baseline") or self.config.get("baseline")
        return chosen if chosen in names else names[0]

    def compared_benchmarks(self) -> list[str]:
        """The benchmarks that two or more policies evaluate: each gets a comparison across its policies."""
        return [name for name in self.benchmarks if len(self.assignment[name]) > 1] if self.members else []

    def comparison_dir(self, benchmark: str) -> Path:
        return self.root / "comparison" / benchmark

    def comparison_paths(self, benchmark: str) -> dict[str, str]:
        """What the comparison across the policies of `benchmark` writes (see compared_benchmarks)."""
        directory = self.comparison_dir(benchmark)
        return {
            "suites": str(directory / "policy_comparison.csv"),
            "tasks": str(directory / "policy_comparison_tasks.csv"),
            "markdown": str(directory / "policy_comparison.md"),
            "plot": str(directory / "success_by_policy.png"),
        }

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
        """The planned batch behind a batch job's wildcards."""
        for batch in self.task_plan(benchmark, suite, task).batches:
            if batch.episodes.label == label:
                return batch
        raise KeyError(f"{benchmark}/{suite}/{task}: no planned batch {label}")

    def results_digest(self, benchmark: str | None = None) -> str:
        """A hash of everything that defines the results (of one benchmark, or of the whole run): the policy
        identity, each task's manifest digest and batches, the reference scores. Gather rules carry it as a
        param, so they rerun when results change meaning and never for an operational setting."""
        plans = [plan for plan in self.tasks if benchmark in (None, plan.ref.benchmark)]
        evaluating = self.members if benchmark is None else {m.policy.name: m for m in self.policies_of(benchmark)}
        return short_hash(
            {
                "run": self.run,
                "policy": (
                    {name: m.policy.identity for name, m in evaluating.items()}
                    if self.members
                    else self.policy.identity
                ),
                "settings": {name: self.settings_digest(name) for name in self.benchmarks if benchmark in (None, name)},
                "tasks": [
                    [plan.ref.benchmark, plan.ref.suite, plan.ref.task, plan.manifest_hash]
                    + [batch.episodes.label for batch in plan.batches]
                    for plan in plans
                ],
                "reference": self.config["reference"],
            }
        )

    @property
    def benchmarks(self) -> list[str]:
        """The benchmarks this campaign evaluates (a member of several policies: those of its policy)."""
        return list(self._benchmarks)

    def section(self, benchmark: str) -> dict[str, Any]:
        """The benchmark's settings (without the policies its section may name)."""
        return section_settings(self.config["benchmarks"][benchmark])

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

    def reference_scores(self, benchmark: str) -> dict[str, float]:
        return self.config["reference"].get(benchmark, {})
