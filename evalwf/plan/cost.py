"""What a batch is expected to cost, and what a set of batches costs on N workers.

`expected_batch_cost` is the one estimate of a batch's simulation time: the plan table sums it, and the
scheduler's longest-work-first priority is meant to sort by it, so the preview and the queue agree.
Before anything ran it is episodes x the task's step limit x an assumed seconds per step (the step limit is an
upper bound: an episode that succeeds early stops sooner). Once batches have finished, their measured
durations take over: per task where the task has finished batches, else a seconds-per-step figure calibrated on
the benchmark's finished batches.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from evalwf.benchmark.adapter import TaskRef, get_adapter
from evalwf.plan.campaign import BatchPlan, PlannedTasks, PolicyCampaign
from evalwf.plan.inventory import survey

DEFAULT_SECONDS_PER_STEP = 0.1  # simulator step plus amortised policy inference on a GPU node: an assumption

MEASURED, CALIBRATED, ASSUMED = "measured", "calibrated", "assumed"
EMULATED = "emulated"  # a benchmark that emulates its simulator's speed (the stand-in's step_time_s) says it


def emulated_step_time(section: Mapping[str, object], ref: TaskRef) -> float:
    """Seconds per step a benchmark section emulates for `ref` (the stand-in's step_time_s: default and per
    task), 0 where it emulates none: such a task is priced by it, as its episodes take that long per step."""
    emulation = section.get("step_time_s")
    if not isinstance(emulation, Mapping):
        return 0.0
    tasks = emulation.get("tasks")
    value = tasks.get(ref.task) if isinstance(tasks, Mapping) and ref.task in tasks else emulation.get("default")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


@dataclass(frozen=True)
class CostModel:
    """Expected seconds per episode of every task of a campaign, and where each figure comes from."""

    seconds_per_step: float  # the assumption, used where nothing of the benchmark was measured
    step_limits: Mapping[TaskRef, int]
    measured: Mapping[TaskRef, float] = field(default_factory=dict)  # seconds per episode of finished batches
    calibrated: Mapping[str, float] = field(default_factory=dict)  # benchmark -> measured seconds per step
    emulated: Mapping[TaskRef, float] = field(default_factory=dict)  # seconds per step a benchmark emulates

    @classmethod
    def build(
        cls,
        campaign: PlannedTasks,
        seconds_per_step: float = DEFAULT_SECONDS_PER_STEP,
        durations: Mapping[TaskRef, Iterable[tuple[float, int]]] | None = None,
    ) -> CostModel:
        """`durations`: per task, (seconds, episodes) of its finished batches (Inventory.durations())."""
        if seconds_per_step <= 0:
            raise ValueError(f"seconds per step must be > 0, got {seconds_per_step}")
        limits = {
            ref: get_adapter(ref.benchmark).episode_step_limit(campaign.settings(ref.benchmark), ref)
            for ref in (plan.ref for plan in campaign.tasks)
        }
        measured: dict[TaskRef, float] = {}
        seconds_by_bench: dict[str, float] = {}
        steps_by_bench: dict[str, float] = {}
        for ref, runs in (durations or {}).items():
            seconds = sum(s for s, _ in runs)
            episodes = sum(n for _, n in runs)
            if episodes <= 0 or ref not in limits:
                continue
            measured[ref] = seconds / episodes
            seconds_by_bench[ref.benchmark] = seconds_by_bench.get(ref.benchmark, 0.0) + seconds
            steps_by_bench[ref.benchmark] = steps_by_bench.get(ref.benchmark, 0.0) + episodes * limits[ref]
        calibrated = {bench: seconds_by_bench[bench] / steps for bench, steps in steps_by_bench.items() if steps > 0}
        emulated = {
            plan.ref: rate
            for plan in campaign.tasks
            if (rate := emulated_step_time(campaign.section(plan.ref.benchmark), plan.ref)) > 0
        }
        return cls(seconds_per_step, limits, measured, calibrated, emulated)

    @classmethod
    def measure(cls, campaign: PolicyCampaign, seconds_per_step: float = DEFAULT_SECONDS_PER_STEP) -> CostModel:
        """From the policy's own result files (validated; a bad file contributes nothing)."""
        return cls.build(campaign, seconds_per_step, survey(campaign).durations())

    def basis(self, ref: TaskRef) -> str:
        if ref in self.measured:
            return MEASURED
        if ref in self.emulated:
            return EMULATED
        return CALIBRATED if ref.benchmark in self.calibrated else ASSUMED

    def seconds_per_episode(self, ref: TaskRef) -> float:
        if ref in self.measured:
            return self.measured[ref]
        if ref in self.emulated:
            return self.step_limits[ref] * self.emulated[ref]
        return self.step_limits[ref] * self.calibrated.get(ref.benchmark, self.seconds_per_step)


def expected_batch_cost(model: CostModel, batch: BatchPlan) -> float:
    """Expected seconds of simulation of one batch: its episodes x the task's expected seconds per episode."""
    return batch.episodes.count * model.seconds_per_episode(batch.ref)


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
    """The cost of the batches still to run: simulation GPU-seconds and the span on `workers` workers."""

    workers: int
    simulation_s: float  # summed expected_batch_cost of the batches to run
    campaign_simulation_s: float  # the same over every batch of the campaign (done ones included)
    span_s: float  # LPT list scheduling of (cost + overhead) per batch
    lower_bound_s: float
    assumptions: list[str]


def estimate(
    model: CostModel,
    campaign: PlannedTasks,
    to_run: Sequence[BatchPlan],
    workers: int,
    batch_overhead_s: float,
) -> Estimate:
    units = [expected_batch_cost(model, batch) + batch_overhead_s for batch in to_run]
    refs = {plan.ref for plan in campaign.tasks}
    bases = {
        basis: sum(model.basis(ref) == basis for ref in refs) for basis in (MEASURED, EMULATED, CALIBRATED, ASSUMED)
    }
    assumptions = []
    if bases[EMULATED]:
        assumptions.append(
            f"{bases[EMULATED]} task(s) priced at the seconds per step their benchmark emulates (step_time_s)"
        )
    if bases[ASSUMED]:
        assumptions.append(
            f"{bases[ASSUMED]} task(s) not measured yet: episode cost = step limit x {model.seconds_per_step:g} s "
            "per step (--seconds-per-step); the step limit is an upper bound, episodes that succeed stop sooner"
        )
    if bases[CALIBRATED]:
        rates = ", ".join(f"{bench} {rate:.3g} s" for bench, rate in sorted(model.calibrated.items()))
        assumptions.append(
            f"{bases[CALIBRATED]} task(s) not measured yet, priced at the seconds per step measured on their "
            f"benchmark's finished batches ({rates})"
        )
    if bases[MEASURED]:
        assumptions.append(
            f"{bases[MEASURED]} task(s) priced at the mean seconds per episode of their finished batches "
            "(duration_s of each batch file)"
        )
    assumptions.append(
        "GPU-hours = expected simulation time summed (one worker per GPU, one batch at a time per worker); "
        "manifest builds and policy server start-up not included"
    )
    assumptions.append(
        f"span: {workers} worker(s) take batches longest first (LPT list scheduling, within 4/3 of the best "
        f"possible), {batch_overhead_s:g} s dispatch overhead per batch (--batch-overhead-s)"
    )
    return Estimate(
        workers=workers,
        simulation_s=sum(expected_batch_cost(model, batch) for batch in to_run),
        campaign_simulation_s=sum(expected_batch_cost(model, batch) for batch in campaign.batches()),
        span_s=list_schedule_span(units, workers),
        lower_bound_s=span_lower_bound(units, workers),
        assumptions=assumptions,
    )
