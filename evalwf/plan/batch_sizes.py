"""How a task's episodes are cut into batches (one Snakemake job each): a fixed `batch_size`, or
`batch_size: {auto: {workers: W, min: a, max: b}}`, which sizes each task's batches so that a campaign's last batches
are short.

Why: with equal batches the last ones of a long-tailed campaign (RoboTwin's 1700-step tasks next to 400-step ones)
keep one worker busy while the others idle. `auto` follows factoring (Flynn Hummel, Schonberg and Flynn, 1992): the
batches are planned in rounds of W, and each batch of a round is worth half the work still unplanned divided by W,
so the sizes fall geometrically to one episode at the end; the longest-first scheduler then runs the large ones
first and the episode-sized ones last.

What an episode is worth to the rule (`sizing_episode_seconds`) is evalwf.plan.cost's figure before anything is
measured, less the reset: the task's step limit x the seconds per step its benchmark emulates, else x its documented
step time (the adapter's cost_figures). Never measured results: a measurement taken after a run would change the
sizes, and so the names, of batches that are already finished. The rule only compares the tasks of one benchmark
with each other (it is unchanged when every cost is scaled), so a documented step time, one for all the tasks of a
benchmark, cancels out, and the reset is left out for that reason too: revising a benchmark's documented figures
renames nothing. What is left are the step limits, which define the episodes themselves, and the config. Same
config and step limits, same batches.

Episodes stay defined by their index alone: the sizes only move the boundaries between batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evalwf.benchmark.adapter import BenchmarkAdapter, TaskRef
from evalwf.benchmark.batches import EpisodeRange, plan_batches
from evalwf.benchmark.settings import BenchmarkSettings


@dataclass(frozen=True)
class AutoBatchSize:
    """The validated `batch_size: {auto: ...}` block (its defaults come from the schema)."""

    workers: int  # the GPUs (workers) the campaign is planned for: the rounds' width
    smallest: int  # `min`: no batch has fewer episodes (but a task's last one, where its episodes do not divide)
    largest: int | None  # `max`: no batch has more episodes; None: up to the task's episodes

    @classmethod
    def of(cls, value: Mapping[str, Mapping[str, int | None]]) -> AutoBatchSize:
        """The rule of a validated `batch_size: {auto: ...}` setting."""
        block = value["auto"]
        workers, smallest, largest = block["workers"], block["min"], block["max"]
        if workers is None or smallest is None:
            raise ValueError(f"batch_size.auto {dict(block)} did not come through its schema (workers and min are set)")
        return cls(workers, smallest, largest)

    def describe(self) -> str:
        upper = f"at most {self.largest}" if self.largest is not None else "no upper bound"
        return f"auto: factoring for {self.workers} workers, at least {self.smallest} episode(s) per batch, {upper}"


def emulated_step_time(section: Mapping[str, object], ref: TaskRef) -> float:
    """Seconds per step a benchmark section emulates for `ref` (the stand-in's step_time_s: default and per
    task), 0 where it emulates none: such a task is priced by it, as its episodes take that long per step."""
    emulation = section.get("step_time_s")
    if not isinstance(emulation, Mapping):
        return 0.0
    tasks = emulation.get("tasks")
    value = tasks.get(ref.task) if isinstance(tasks, Mapping) and ref.task in tasks else emulation.get("default")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def sizing_episode_seconds(
    adapter: BenchmarkAdapter[BenchmarkSettings],
    settings: BenchmarkSettings,
    section: Mapping[str, object],
    ref: TaskRef,
) -> float:
    """What one episode of `ref` is worth to the sizing rule: its step limit x the step time its benchmark emulates,
    else x the benchmark's documented step time (no reset, nothing measured: module docstring)."""
    emulated = emulated_step_time(section, ref)
    return adapter.episode_step_limit(settings, ref) * (emulated if emulated > 0 else adapter.cost_figures.step_s)


def factoring_sizes(tasks: Sequence[tuple[int, float]], rule: AutoBatchSize) -> list[list[int]]:
    """Batch sizes per task (largest first), for tasks given as (episodes, seconds per episode): rounds of
    `rule.workers` batches, each worth half the unplanned work / workers, cut from the task with the most unplanned
    work (the first such task on a tie), within the rule's bounds. Every task's sizes sum to its episodes."""
    if rule.workers < 1 or rule.smallest < 1 or (rule.largest is not None and rule.largest < rule.smallest):
        raise ValueError(f"bad batch size rule {rule}: need workers >= 1 and 1 <= min <= max")
    remaining = [episodes for episodes, _ in tasks]
    costs = [max(seconds, 0.0) for _, seconds in tasks]
    sizes: list[list[int]] = [[] for _ in tasks]
    unplanned = sum(n * c for n, c in zip(remaining, costs, strict=True))
    while any(remaining):
        target = unplanned / (2 * rule.workers)
        for _ in range(rule.workers):
            open_tasks = [i for i, n in enumerate(remaining) if n > 0]
            if not open_tasks:
                break
            i = max(open_tasks, key=lambda t: (remaining[t] * costs[t], -t))
            count = _bounded(int(target / costs[i] + 0.5) if costs[i] > 0 else remaining[i], rule, remaining[i])
            sizes[i].append(count)
            remaining[i] -= count
            unplanned -= count * costs[i]
    return [sorted(task_sizes, reverse=True) for task_sizes in sizes]


def _bounded(count: int, rule: AutoBatchSize, remaining: int) -> int:
    """`count` within the rule's bounds and the task's remaining episodes, leaving no remainder below `min` where
    that can be helped."""
    count = max(count, rule.smallest)
    if rule.largest is not None:
        count = min(count, rule.largest)
    count = min(count, remaining)
    left = remaining - count
    if 0 < left < rule.smallest:  # the rest would make a batch below min: take it along, or leave exactly min
        count = remaining if rule.largest is None or remaining <= rule.largest else remaining - rule.smallest
    return count


def consecutive(sizes: Sequence[int]) -> list[EpisodeRange]:
    """Batches of these sizes, in this order, covering episodes [0, sum(sizes))."""
    ranges, start = [], 0
    for count in sizes:
        ranges.append(EpisodeRange(start, count))
        start += count
    return ranges


def plan_task_batches(
    adapter: BenchmarkAdapter[BenchmarkSettings],
    settings: BenchmarkSettings,
    section: Mapping[str, object],
    refs: Sequence[TaskRef],
) -> dict[TaskRef, list[EpisodeRange]]:
    """Each task's batches under the section's `batch_size`: fixed sizes (evalwf.benchmark.batches.plan_batches),
    or the factoring rule over all the section's tasks."""
    size = settings.batch_size
    if isinstance(size, int):
        return {ref: plan_batches(settings.episodes_per_task, size) for ref in refs}
    rule = AutoBatchSize.of(size)
    tasks = [(settings.episodes_per_task, sizing_episode_seconds(adapter, settings, section, ref)) for ref in refs]
    return {ref: consecutive(sizes) for ref, sizes in zip(refs, factoring_sizes(tasks, rule), strict=True)}
