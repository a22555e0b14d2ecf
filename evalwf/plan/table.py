"""The plan table: per benchmark and suite, what a campaign contains, what is done, what is left and what it
costs; printed by `evalwf plan` and at the end of `snakemake -n`, as text or JSON (one dict for scripts).

Counts come from the Campaign (the plan the Snakefile expands), done/to-run from the validated result files
(evalwf.plan.inventory), costs from evalwf.plan.cost.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from evalwf.benchmark.adapter import get_adapter
from evalwf.common.commands import evalwf_command
from evalwf.plan.batch_sizes import AutoBatchSize
from evalwf.plan.campaign import Campaign, PlannedTasks, PolicyCampaign, TaskPlan
from evalwf.plan.cost import (
    CostModel,
    Estimate,
    benchmark_timings,
    estimate,
    expected_batch_cost,
    suite_timings,
)
from evalwf.plan.inventory import BadBatch, Inventory, stale_results, stale_results_note, survey
from evalwf.plan.rounds import expected_batch_weights
from evalwf.plan.timings import measure_dispatch

DEFAULT_WORKERS = 4
DEFAULT_BATCH_OVERHEAD_S = 3.0  # per batch on a worker: the job step (0.4 s warm, README "Measured") plus the
# simulator interpreter and environment creation that a real benchmark adds (LIBERO 1.4-4.6 s)


@dataclass(frozen=True)
class PlanRow:
    """One benchmark suite (RoboTwin: one task config x instruction type), or the total when suite is ''."""

    benchmark: str
    suite: str
    labels: dict[str, str]  # the adapter's names for the suite (RoboTwin: task_config, instruction_type)
    tasks: int
    episodes: int
    batches: int
    batch_sizes: tuple[int, int]  # fewest and most episodes in one of the row's batches (batch_size auto: a range)
    done: int
    to_run: int
    invalid: int  # of to_run: a result file exists but fails validation (named in Plan.invalid)
    manifests_to_build: int
    steps_per_episode: tuple[int, int]  # smallest and largest step limit of the row's tasks
    gpu_hours_to_run: float
    priced_by: str  # measured / suite measured / benchmark measured / emulated / assumed / conservative, or mixed


@dataclass(frozen=True)
class Plan:
    run: str
    root: str
    policy_identity: str
    other_policy_identities: dict[str, int]  # found in existing result files (they do not count) -> files
    rows: list[PlanRow]
    total: PlanRow
    invalid: list[BadBatch]
    estimate: Estimate
    seconds_per_step: float | None  # the user's assumption; None: measured or documented figures
    batch_overhead_s: float
    notes: list[str] = field(default_factory=list)
    stale_results: list[str] = field(default_factory=list)  # of the whole run folder (inventory.stale_results)


def _row(
    benchmark: str,
    suite: str,
    labels: dict[str, str],
    plans: list[TaskPlan],
    found: Inventory,
    model: CostModel,
    weights: Mapping[str, float],
) -> PlanRow:
    batches = [batch for plan in plans for batch in plan.batches]
    to_run = [batch for batch in batches if not found.is_done(batch)]
    limits = [model.step_limits[plan.ref] for plan in plans]
    bases = {model.basis(plan.ref) for plan in plans}
    return PlanRow(
        benchmark=benchmark,
        suite=suite,
        labels=labels,
        tasks=len(plans),
        episodes=sum(batch.episodes.count for batch in batches),
        batches=len(batches),
        batch_sizes=(min(b.episodes.count for b in batches), max(b.episodes.count for b in batches)),
        done=len(batches) - len(to_run),
        to_run=len(to_run),
        invalid=sum(batch.path in found.bad for batch in to_run),
        manifests_to_build=len({plan.manifest_path for plan in plans} & found.manifests_missing),
        steps_per_episode=(min(limits), max(limits)),
        gpu_hours_to_run=sum(weights.get(b.path, 1.0) * expected_batch_cost(model, b) for b in to_run) / 3600,
        priced_by=bases.pop() if len(bases) == 1 else "mixed",
    )


def _manifests_to_build(campaign: PlannedTasks, found: Inventory) -> dict[str, int]:
    """Benchmark -> manifests missing and not in the manifest cache (a cached one is a copy)."""
    counts: dict[str, int] = {}
    for path, plan in campaign.manifests().items():
        if path in found.manifests_missing and path not in found.manifests_cached:
            counts[plan.ref.benchmark] = counts.get(plan.ref.benchmark, 0) + 1
    return counts


def _batch_overhead(campaign: PlannedTasks, given: float | None) -> tuple[float, float, str]:
    """Per batch between batches on a worker: the user's figure, else what earlier runs measured, else the default."""
    if given is not None:
        return given, given, "--batch-overhead-s"
    dispatch = measure_dispatch(Path(campaign.config.results_dir), list(campaign.benchmarks))
    if dispatch is None:
        return DEFAULT_BATCH_OVERHEAD_S, DEFAULT_BATCH_OVERHEAD_S, "assumed, nothing measured yet; --batch-overhead-s"
    return dispatch.gap_s, dispatch.gap_s_p90, f"measured between {dispatch.gaps} pairs of consecutive batches"


def planned_workers(campaign: PlannedTasks) -> int:
    """The workers a campaign is planned for: the most that a `batch_size: {auto: ...}` names, else DEFAULT_WORKERS."""
    rules = [campaign.settings(name).batch_size for name in campaign.benchmarks]
    return max((AutoBatchSize.of(rule).workers for rule in rules if not isinstance(rule, int)), default=DEFAULT_WORKERS)


def build_plan(
    campaign: PolicyCampaign,
    *,
    seconds_per_step: float | None = None,
    workers: int | None = None,
    batch_overhead_s: float | None = None,
    weights: Mapping[str, float] | None = None,
) -> Plan:
    """Survey the campaign's files once, price every batch, and group by benchmark and suite. `weights`: batch path
    -> the chance it is evaluated (an adaptive sweep: rounds.expected_batch_weights of the whole campaign)."""
    weights = weights or {}
    workers = workers or planned_workers(campaign)
    found = survey(campaign)
    model = CostModel.build(
        campaign, seconds_per_step, found.durations(), suite_timings(campaign), benchmark_timings(campaign)
    )
    groups: dict[tuple[str, str], list[TaskPlan]] = {}
    for plan in campaign.tasks:
        groups.setdefault((plan.ref.benchmark, plan.ref.suite), []).append(plan)
    rows = [
        _row(bench, suite, get_adapter(bench).describe_suite(suite), plans, found, model, weights)
        for (bench, suite), plans in groups.items()
    ]
    total = _row("total", "", {}, campaign.tasks, found, model, weights)
    to_run = [batch for batch in campaign.batches() if not found.is_done(batch)]
    overhead, overhead_p90, overhead_basis = _batch_overhead(campaign, batch_overhead_s)
    notes = []
    if sum(row.manifests_to_build for row in rows) != total.manifests_to_build:
        notes.append("suites that share manifests (RoboTwin seen/unseen) count them in each row; the total once")
    for benchmark in campaign.benchmarks:
        setting = campaign.settings(benchmark).batch_size
        if not isinstance(setting, int):
            notes.append(
                f"{benchmark}: batch sizes {AutoBatchSize.of(setting).describe()}, sized by the tasks' step limits "
                "and the config alone, so that nothing measured later re-sizes (renames) a finished batch"
            )
    if found.manifests_cached:
        notes.append(f"{len(found.manifests_cached)} of the manifests to build are in the manifest cache (copied)")
    return Plan(
        run=campaign.run,
        root=str(campaign.out),  # results/<run>, or results/<run>/<policy> for one of several policies
        policy_identity=campaign.policy.identity,
        other_policy_identities=found.other_policy_identities(campaign.policy.identity),
        rows=rows,
        total=total,
        invalid=sorted(found.bad.values(), key=lambda bad: bad.batch.path),
        estimate=estimate(
            model,
            campaign,
            to_run,
            workers,
            overhead,
            _manifests_to_build(campaign, found),
            overhead_p90,
            overhead_basis,
            weights,
        ),
        seconds_per_step=seconds_per_step,
        batch_overhead_s=overhead,
        notes=notes,
        stale_results=stale_results(campaign),
    )


_COLUMNS = (
    ("benchmark", "benchmark"),
    ("suite", "suite"),
    ("tasks", "tasks"),
    ("episodes", "episodes"),
    ("batches", "batches"),
    ("episodes/batch", "batch_sizes"),
    ("done", "done"),
    ("to run", "to_run"),
    ("invalid", "invalid"),
    ("manifests to build", "manifests_to_build"),
    ("steps/episode", "steps_per_episode"),
    ("GPU-h to run", "gpu_hours_to_run"),
    ("priced by", "priced_by"),
)


def _cell(value: Any) -> str:
    if isinstance(value, tuple):
        low, high = value
        return str(low) if low == high else f"{low}-{high}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def render_text(plan: Plan, max_invalid: int = 5) -> str:
    """The table, the cost line and its assumptions; at most `max_invalid` bad result files named."""
    cells = [[_cell(getattr(row, key)) for _, key in _COLUMNS] for row in [*plan.rows, plan.total]]
    widths = [max(len(header), *(len(row[i]) for row in cells)) for i, (header, _) in enumerate(_COLUMNS)]
    text_columns = {0, 1, len(_COLUMNS) - 1}

    def line(values: list[str]) -> str:
        padded = (
            v.ljust(w) if i in text_columns else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )
        return "  ".join(padded).rstrip()

    evaluated = ", ".join(dict.fromkeys(row.benchmark for row in plan.rows))
    out = [f"Plan of run {plan.run} ({plan.root})", f"policy identity: {plan.policy_identity} (evaluates {evaluated})"]
    for identity, files in sorted(plan.other_policy_identities.items()):
        out.append(f"  also found in {files} existing result file(s), which do not count: {identity}")
    out += [line([header for header, _ in _COLUMNS]), *(line(row) for row in cells)]
    out += [f"note: {note}" for note in plan.notes]
    est = plan.estimate
    manifests = f" + {est.manifest_s / 3600:.2f} building manifests" if est.manifest_s else ""
    upper = ""
    if est.campaign_upper_s > est.campaign_simulation_s:
        upper = f"; full sweep {est.upper_simulation_s / 3600:.2f}, whole {est.campaign_upper_s / 3600:.2f}"
    out.append(
        f"Cost of the {plan.total.to_run} batches to run: {est.simulation_s / 3600:.2f} GPU-hours of simulation "
        f"(p90 {est.simulation_s_p90 / 3600:.2f}; whole campaign {est.campaign_simulation_s / 3600:.2f}{upper})"
        f"{manifests}; "
        f"span on {est.workers} worker(s) {_hours(est.span_s)} (p90 {_hours(est.span_s_p90)}, "
        f"lower bound {_hours(est.lower_bound_s)})"
    )
    out += [f"  assumes: {assumption}" for assumption in est.assumptions]
    if plan.invalid:
        out.append(f"{len(plan.invalid)} result file(s) exist but do not count (counted as to run; delete them):")
        out += [f"  {bad.reason}" for bad in plan.invalid[:max_invalid]]
        if len(plan.invalid) > max_invalid:
            out.append(
                f"  ... and {len(plan.invalid) - max_invalid} more ({evalwf_command('plan', '--json')} lists all)"
            )
    return "\n".join(out)


def to_json(plan: Plan) -> dict[str, Any]:
    """Everything render_text shows, every invalid file included, in plain JSON types."""

    def row(item: PlanRow) -> dict[str, Any]:
        data = asdict(item)
        data["steps_per_episode"] = {"min": item.steps_per_episode[0], "max": item.steps_per_episode[1]}
        data["batch_sizes"] = {"min": item.batch_sizes[0], "max": item.batch_sizes[1]}
        return data

    est = plan.estimate
    return {
        "run": plan.run,
        "root": plan.root,
        "policy_identity": plan.policy_identity,
        "other_policy_identities": plan.other_policy_identities,
        "rows": [row(item) for item in plan.rows],
        "total": row(plan.total),
        "invalid": [{"path": bad.batch.path, "reason": bad.reason} for bad in plan.invalid],
        "cost": {
            "workers": est.workers,
            "seconds_per_step": plan.seconds_per_step,
            "batch_overhead_s": plan.batch_overhead_s,
            "gpu_hours_to_run": est.simulation_s / 3600,
            "gpu_hours_to_run_p90": est.simulation_s_p90 / 3600,
            "manifest_hours": est.manifest_s / 3600,
            "span_hours_p90": est.span_s_p90 / 3600,
            "gpu_hours_campaign": est.campaign_simulation_s / 3600,
            "gpu_hours_to_run_full_sweep": est.upper_simulation_s / 3600,
            "gpu_hours_campaign_full_sweep": est.campaign_upper_s / 3600,
            "span_hours": est.span_s / 3600,
            "span_lower_bound_hours": est.lower_bound_s / 3600,
            "assumptions": est.assumptions,
        },
        "notes": plan.notes,
        "stale_results": plan.stale_results,
    }


class _ErrorSeen(logging.Handler):
    """Notes whether Snakemake logged an error: a failed dry run ends on its error, not on a plan."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        self.seen = True


_AT_EXIT: list[str] = []
_ERRORS = _ErrorSeen()
SNAKEMAKE_LOGGER = "snakemake.logging"  # the logger Snakemake writes its job blocks and errors to


def _print_plans() -> None:
    if _AT_EXIT and not _ERRORS.seen:
        print("\n\n".join(_AT_EXIT), flush=True)


def render_campaign(campaign: Campaign, plans: list[Plan]) -> str:
    """Every policy's plan, then the results under the run's folder that are not part of it (named once)."""
    note = stale_results_note(campaign)
    return "\n\n".join([render_text(plan) for plan in plans] + ([note] if note else []))


@cache
def print_plan_once(campaign: Campaign) -> None:
    """The plans of `snakemake -n` (one per policy), with the default assumptions, printed when the process exits:
    after the job blocks Snakemake prints (thousands of lines for a full campaign), so that they are what the user
    sees last. Built now (a failure to build them fails the dry run here); skipped when Snakemake logged an error.
    Once per campaign, since Snakemake may evaluate the input function that calls this more than once."""
    plan_command = evalwf_command("plan", "--configfile", "...", "--workers", "N", "--seconds-per-step", "S")
    hint = f"(other worker counts or assumptions: {plan_command})"
    weights = expected_batch_weights(campaign)
    plans = [build_plan(member, weights=weights) for member in campaign.policy_campaigns()]
    _AT_EXIT.append(f"{render_campaign(campaign, plans)}\n{hint}")
    if len(_AT_EXIT) == 1:
        logging.getLogger(SNAKEMAKE_LOGGER).addHandler(_ERRORS)
        atexit.register(_print_plans)
