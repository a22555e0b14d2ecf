"""What a batch is expected to cost, and what a set of batches costs on N workers.

`expected_batch_cost` is the one estimate of a batch's simulation time: the plan table sums it, and the
scheduler's longest-work-first priority is meant to sort by it, so the preview and the queue agree.
It is priced, in this order, from the task's own finished batches, from the reset and step times and the
steps used that batches of the same benchmark and suite measured (this run's or any earlier run's under
results_dir: a new run of a suite learns from the last), from the reset and step times another suite of the same
benchmark measured (every episode then runs to its limit), from a benchmark's emulated step time, from a
`--seconds-per-step` the user gave, or from the benchmark's documented conservative figures (its adapter's
cost_figures). Every figure comes as a median and a 90th percentile; the estimate adds the manifests still to
build.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalwf.benchmark.adapter import CostFigures, TaskRef, get_adapter
from evalwf.plan.batch_sizes import emulated_step_time
from evalwf.plan.campaign import BatchPlan, PlannedTasks, PolicyCampaign
from evalwf.plan.inventory import survey
from evalwf.plan.timings import SuiteTiming, measure_benchmarks, measure_suites, quantile

MEASURED, SUITE_MEASURED, ASSUMED, CONSERVATIVE_BASIS = "measured", "suite measured", "assumed", "conservative"
BENCHMARK_MEASURED = "benchmark measured"  # another suite of the benchmark measured the step and reset times
EMULATED = "emulated"  # a benchmark that emulates its simulator's speed (the stand-in's step_time_s) says it


@dataclass(frozen=True)
class CostModel:
    """Expected seconds per episode of every task of a campaign (median and 90th percentile), and the basis of
    each figure: the task's own finished batches, else its suite's episodes measured by any run under results_dir
    (evalwf.plan.timings), else the seconds per step its benchmark emulates, else `seconds_per_step` when the user
    gave one, else the benchmark's documented conservative figures (BenchmarkAdapter.cost_figures)."""

    seconds_per_step: float | None  # the user's assumption (--seconds-per-step); None: cost_figures
    step_limits: Mapping[TaskRef, int]
    measured: Mapping[TaskRef, float] = field(default_factory=dict)  # seconds per episode of finished batches
    measured_p90: Mapping[TaskRef, float] = field(default_factory=dict)  # 90th percentile over those batches
    timings: Mapping[tuple[str, str], SuiteTiming] = field(default_factory=dict)  # (benchmark, suite) -> measured
    emulated: Mapping[TaskRef, float] = field(default_factory=dict)  # seconds per step a benchmark emulates
    benchmark_timings: Mapping[str, SuiteTiming] = field(default_factory=dict)  # benchmark -> any suite measured
    recorded_limits: Mapping[TaskRef, int] = field(default_factory=dict)  # the limit as records count steps

    @classmethod
    def build(
        cls,
        campaign: PlannedTasks,
        seconds_per_step: float | None = None,
        durations: Mapping[TaskRef, Iterable[tuple[float, int]]] | None = None,
        timings: Mapping[tuple[str, str], SuiteTiming] | None = None,
        benchmark_timings: Mapping[str, SuiteTiming] | None = None,
    ) -> CostModel:
        """`durations`: per task, (seconds, episodes) of its finished batches (Inventory.durations());
        `timings`: per suite, what earlier batches measured (timings.measure_suites); `benchmark_timings`: per
        benchmark, over all its suites (timings.measure_benchmarks), for the suites not measured yet."""
        if seconds_per_step is not None and seconds_per_step <= 0:
            raise ValueError(f"seconds per step must be > 0, got {seconds_per_step}")
        limits = {
            ref: get_adapter(ref.benchmark).episode_step_limit(campaign.settings(ref.benchmark), ref)
            for ref in (plan.ref for plan in campaign.tasks)
        }
        measured: dict[TaskRef, float] = {}
        measured_p90: dict[TaskRef, float] = {}
        for ref, runs in (durations or {}).items():
            runs = [(s, n) for s, n in runs if n > 0]
            if not runs or ref not in limits:
                continue
            measured[ref] = sum(s for s, _ in runs) / sum(n for _, n in runs)
            measured_p90[ref] = max(measured[ref], quantile([s / n for s, n in runs], 0.9))
        emulated = {
            plan.ref: rate
            for plan in campaign.tasks
            if (rate := emulated_step_time(campaign.section(plan.ref.benchmark), plan.ref)) > 0
        }
        benchmark_wide = {name: timing.failing() for name, timing in (benchmark_timings or {}).items()}
        return cls(
            seconds_per_step,
            limits,
            measured,
            measured_p90,
            dict(timings or {}),
            emulated,
            benchmark_wide,
            recorded_step_limits(campaign),
        )

    @classmethod
    def measure(cls, campaign: PolicyCampaign, seconds_per_step: float | None = None) -> CostModel:
        """From the campaign's own result files (validated; a bad file contributes nothing) and every batch of
        its benchmarks' suites under results_dir."""
        return cls.build(
            campaign,
            seconds_per_step,
            survey(campaign).durations(),
            suite_timings(campaign),
            benchmark_timings(campaign),
        )

    def basis(self, ref: TaskRef) -> str:
        if ref in self.measured:
            return MEASURED
        if (ref.benchmark, ref.suite) in self.timings:
            return SUITE_MEASURED
        if ref in self.emulated:
            return EMULATED
        if ref.benchmark in self.benchmark_timings:
            return BENCHMARK_MEASURED
        return ASSUMED if self.seconds_per_step is not None else CONSERVATIVE_BASIS

    def conservative(self, benchmark: str) -> CostFigures:
        """The benchmark's documented figures (its adapter's cost_figures)."""
        return get_adapter(benchmark).cost_figures

    def seconds_per_episode(self, ref: TaskRef, p90: bool = False) -> float:
        """Median (or 90th percentile) seconds of one episode of `ref`, its batch's set-up excluded except where
        the task's own batches measured it (their duration_s holds it)."""
        limit = self.step_limits[ref]
        if ref in self.measured:
            return self.measured_p90[ref] if p90 else self.measured[ref]
        timing = self.timing(ref)
        if timing is not None:  # measured per step as the records count steps: priced at the limit so counted
            used = timing.steps_used_p90 if p90 else timing.steps_used
            recorded = self.recorded_limits.get(ref, limit)
            return timing.reset_s + recorded * used * (timing.step_s_p90 if p90 else timing.step_s)
        if ref in self.emulated:
            return limit * self.emulated[ref]
        if self.seconds_per_step is not None:
            return limit * self.seconds_per_step
        figures = self.conservative(ref.benchmark)
        return figures.reset_s + limit * figures.step_s

    def timing(self, ref: TaskRef) -> SuiteTiming | None:
        """What prices `ref` where its own batches do not: its suite's measured figures, else (unless its benchmark
        emulates its step time) its benchmark's, with every episode at its limit; None: nothing measured."""
        if (ref.benchmark, ref.suite) in self.timings:
            return self.timings[(ref.benchmark, ref.suite)]
        return None if ref in self.emulated else self.benchmark_timings.get(ref.benchmark)

    def batch_setup_s(self, ref: TaskRef, p90: bool = False) -> float:
        """Seconds a batch spends outside its episodes, as its suite (else benchmark) measured them (0 where the
        task's own durations already hold it, or nothing was measured)."""
        timing = self.timing(ref)
        if ref in self.measured or timing is None:
            return 0.0
        return timing.setup_s_p90 if p90 else timing.setup_s


def recorded_step_limits(campaign: PlannedTasks) -> dict[TaskRef, int]:
    """Each task's step limit under this config as its benchmark's records count steps (recorded_step_limit)."""
    return {
        plan.ref: get_adapter(plan.ref.benchmark).recorded_step_limit(campaign.settings(plan.ref.benchmark), plan.ref)
        for plan in campaign.tasks
    }


def suite_timings(campaign: PlannedTasks) -> dict[tuple[str, str], SuiteTiming]:
    """What every batch under results_dir measured of the campaign's suites (this run's and earlier runs')."""
    suites: dict[tuple[str, str], dict[str, int]] = {}
    for ref, limit in recorded_step_limits(campaign).items():
        suites.setdefault((ref.benchmark, ref.suite), {})[ref.task] = limit
    return measure_suites(Path(campaign.config.results_dir), suites)


def benchmark_timings(campaign: PlannedTasks) -> dict[str, SuiteTiming]:
    """What every batch under results_dir measured of the campaign's benchmarks, any suite: prices the suites that
    were not measured yet by this machine's step and reset times rather than by documented figures."""
    limits: dict[str, int] = {}
    for ref, limit in recorded_step_limits(campaign).items():
        limits[ref.benchmark] = max(limit, limits.get(ref.benchmark, 0))
    return measure_benchmarks(Path(campaign.config.results_dir), limits)


def expected_batch_cost(model: CostModel, batch: BatchPlan, p90: bool = False) -> float:
    """Expected seconds of one batch on a worker: its episodes x the task's seconds per episode, plus its set-up
    where measured. Median, or with `p90` the 90th percentile figures."""
    return batch.episodes.count * model.seconds_per_episode(batch.ref, p90) + model.batch_setup_s(batch.ref, p90)


def list_schedule_span(durations: Sequence[float], workers: int) -> float:
    """Span of longest-first greedy list scheduling (LPT): each unit, longest first, goes to the worker that
    is free first. Graham (1969): at most (4/3 - 1/(3 workers)) x the optimal span."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    finish = [0.0] * min(workers, max(len(durations), 1))
    for duration in sorted(durations, reverse=True):
        heapq.heappush(finish, heapq.heappop(finish) + duration)
    return max(finish)


def span_lower_bound(durations: Sequence[float], workers: int) -> float:
    """No schedule beats max(total work / workers, longest unit)."""
    return max(sum(durations) / workers, max(durations, default=0.0))


@dataclass(frozen=True)
class Estimate:
    """The cost of the batches still to run (median and 90th percentile): simulation GPU-seconds, the manifest
    builds, and the span on `workers` workers (manifests first, then the batches)."""

    workers: int
    simulation_s: float  # summed expected_batch_cost of the batches to run
    simulation_s_p90: float
    campaign_simulation_s: float  # the same over every batch of the campaign (done ones included)
    upper_simulation_s: float  # the batches to run of a full adaptive sweep (every round of every policy)
    campaign_upper_s: float  # the same over every batch of the campaign
    manifest_s: float  # the manifests still to build, at the benchmark's documented figure each
    span_s: float  # LPT list scheduling of (cost + overhead) per batch, after the manifests
    span_s_p90: float
    lower_bound_s: float
    assumptions: list[str]


def _measured_figures(t: SuiteTiming) -> str:
    """A measured timing as the plan names it: how many episodes, the spread, and how uncertain it is."""
    spread = (
        "one episode: no spread measured"
        if t.episodes == 1
        else f"per-step range {t.step_s_min:.3g}-{t.step_s_max:.3g} s over the episodes"
    )
    rough = f"; only {t.episodes} episode(s): a rough figure" if t.uncertain else ""
    limits = "/".join(str(limit) for limit in t.limits)
    return (
        f"{t.episodes} episode(s) (step limit {limits}) measured by run(s) {', '.join(t.runs)}: "
        f"reset {t.reset_s:.2f} s, step {t.step_s:.3g} s (p90 {t.step_s_p90:.3g}; {spread}{rough}), "
        f"{t.setup_s:.1f} s per batch outside episodes (p90 {t.setup_s_p90:.1f})"
    )


def _basis_lines(model: CostModel, refs: set[TaskRef]) -> list[str]:
    """Which figures priced how many tasks, named so that a reader can check them."""
    order = (MEASURED, SUITE_MEASURED, BENCHMARK_MEASURED, EMULATED, ASSUMED, CONSERVATIVE_BASIS)
    bases = {basis: [ref for ref in refs if model.basis(ref) == basis] for basis in order}
    lines = []
    if bases[MEASURED]:
        lines.append(
            f"{len(bases[MEASURED])} task(s) priced at the seconds per episode of their own finished batches "
            "(duration_s of each batch file; 90th percentile over the batches)"
        )
    for key in sorted({(ref.benchmark, ref.suite) for ref in bases[SUITE_MEASURED]}):
        t = model.timings[key]
        count = sum((ref.benchmark, ref.suite) == key for ref in bases[SUITE_MEASURED])
        lines.append(
            f"{count} task(s) of {key[0]} {key[1]} priced from {_measured_figures(t)}; success {t.successes} of "
            f"{t.episodes}: an episode expected to run {100 * t.steps_used:.0f}% of its step limit (p90 "
            f"{100 * t.steps_used_p90:.0f}%; a failure runs to the limit)"
        )
    for benchmark in sorted({ref.benchmark for ref in bases[BENCHMARK_MEASURED]}):
        count = sum(ref.benchmark == benchmark for ref in bases[BENCHMARK_MEASURED])
        lines.append(
            f"{count} task(s) of {benchmark} in suites not measured yet priced from its other suites: "
            f"{_measured_figures(model.benchmark_timings[benchmark])}; every episode runs to its step limit"
        )
    if bases[EMULATED]:
        lines.append(f"{len(bases[EMULATED])} task(s) priced at the seconds per step their benchmark emulates")
    if bases[ASSUMED]:
        lines.append(
            f"{len(bases[ASSUMED])} task(s) not measured yet: episode = step limit x {model.seconds_per_step:g} s "
            "per step (--seconds-per-step, no reset)"
        )
    for benchmark in sorted({ref.benchmark for ref in bases[CONSERVATIVE_BASIS]}):
        f = model.conservative(benchmark)
        count = sum(ref.benchmark == benchmark for ref in bases[CONSERVATIVE_BASIS])
        lines.append(
            f"{count} task(s) of {benchmark} not measured yet: documented conservative figures, episode = reset "
            f"{f.reset_s:g} s + step limit x {f.step_s:g} s (every episode runs to its limit)"
        )
    return lines


def estimate(
    model: CostModel,
    campaign: PlannedTasks,
    to_run: Sequence[BatchPlan],
    workers: int,
    batch_overhead_s: float,
    manifests_to_build: Mapping[str, int] | None = None,
    batch_overhead_s_p90: float | None = None,
    overhead_basis: str = "--batch-overhead-s",
    weights: Mapping[str, float] | None = None,
) -> Estimate:
    """`manifests_to_build`: benchmark -> manifests missing (built before their batches, one job each);
    `batch_overhead_s_p90`: the dispatch overhead's 90th percentile (default: `batch_overhead_s`); `weights`: batch
    path -> the chance it is evaluated (an adaptive sweep's rounds, rounds.expected_batch_weights; default 1)."""
    overhead_p90 = batch_overhead_s if batch_overhead_s_p90 is None else batch_overhead_s_p90
    chance = (lambda batch: weights.get(batch.path, 1.0)) if weights else (lambda batch: 1.0)
    manifests = [
        model.conservative(bench).manifest_s for bench, n in (manifests_to_build or {}).items() for _ in range(n)
    ]
    manifest_span = list_schedule_span(manifests, workers) if manifests else 0.0
    units = [chance(batch) * (expected_batch_cost(model, batch) + batch_overhead_s) for batch in to_run]
    units_p90 = [chance(batch) * (expected_batch_cost(model, batch, p90=True) + overhead_p90) for batch in to_run]
    assumptions = _basis_lines(model, {plan.ref for plan in campaign.tasks})
    if manifests:
        built = ", ".join(
            f"{n} of {bench} at {model.conservative(bench).manifest_s:g} s"
            for bench, n in manifests_to_build.items()
            if n
        )
        assumptions.append(f"manifests to build first: {built} each (documented figures)")
    assumptions.append(
        "GPU-hours = expected simulation time summed (one worker per GPU, one batch at a time per worker); "
        "policy server start-up not included; median figures, p90 the 90th percentiles"
    )
    assumptions.append(
        f"span: {workers} worker(s) build the manifests, then take batches longest first (LPT list scheduling, "
        f"within 4/3 of the best possible), {batch_overhead_s:.3g} s dispatch overhead per batch (p90 "
        f"{overhead_p90:.3g} s; {overhead_basis})"
    )
    if any(chance(batch) < 1.0 for batch in campaign.batches()):
        assumptions.append(
            "adaptive sweep: each batch priced at the chance its round is evaluated (decisions written so far are "
            "facts; after them a policy that can be dropped stops after any later round with equal chance, and one "
            "racing policy, the best or the baseline, runs every round); the full sweep is the upper bound"
        )
    return Estimate(
        workers=workers,
        simulation_s=sum(chance(batch) * expected_batch_cost(model, batch) for batch in to_run),
        simulation_s_p90=sum(chance(batch) * expected_batch_cost(model, batch, p90=True) for batch in to_run),
        campaign_simulation_s=sum(chance(batch) * expected_batch_cost(model, batch) for batch in campaign.batches()),
        upper_simulation_s=sum(expected_batch_cost(model, batch) for batch in to_run),
        campaign_upper_s=sum(expected_batch_cost(model, batch) for batch in campaign.batches()),
        manifest_s=sum(manifests),
        span_s=manifest_span + (list_schedule_span(units, workers) if units else 0.0),
        span_s_p90=manifest_span + (list_schedule_span(units_p90, workers) if units_p90 else 0.0),
        lower_bound_s=manifest_span + span_lower_bound(units, workers),
        assumptions=assumptions,
    )
