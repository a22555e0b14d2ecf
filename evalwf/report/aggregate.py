"""Merge validated batch results into task-level and suite/benchmark-level tables.

Every batch file is validated first (evalwf.plan.results). A run with missing batches is never
summarised: that raises, naming what is missing (`evalwf status` shows an unfinished run, labelled partial).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from evalwf.benchmark.adapter import get_adapter
from evalwf.common.atomic import atomic_write_text
from evalwf.common.commands import evalwf_command
from evalwf.plan.campaign import PolicyCampaign
from evalwf.plan.manifest import load_manifest, manifest_bundle
from evalwf.plan.results import check_policy_servers, validate_batch_result
from evalwf.report.environments import BatchRef, environment_html, environment_lines, environment_markdown
from evalwf.report.reference import compare_with_reference
from evalwf.report.stats import TaskTally, wilson_interval

__all__ = ["IncompleteRunError", "TaskTally", "summarize_benchmark", "tally_benchmark", "wilson_interval"]


class IncompleteRunError(RuntimeError):
    """Some batches have no result yet: the summary would not be final."""


def tally_benchmark(campaign: PolicyCampaign, benchmark: str, planned: set[str] | None = None) -> list[TaskTally]:
    """Validate every present batch file of a benchmark and count episodes and successes per task.

    `planned`: the batches the policy evaluates when an adaptive sweep dropped it (the others are not missing, and
    its tables say partial); None: all of them."""
    adapter = get_adapter(benchmark)
    tallies, missing = [], []
    servers: dict[str, dict | None] = {}  # an external policy: what its server said, per batch
    for plan in campaign.tasks_of(benchmark):
        manifest = load_manifest(plan.manifest_path, plan.manifest_hash) if Path(plan.manifest_path).exists() else None
        tally = TaskTally(
            plan.ref.suite,
            plan.ref.task,
            batches_total=len(plan.batches),
            episodes_total=plan.num_episodes,
            instruction=adapter.task_instruction(plan.ref.task, manifest),
            manifest_bundle=manifest_bundle(plan.manifest_path) or "",
        )
        for batch in plan.batches:
            if planned is not None and batch.path not in planned:
                continue
            if not Path(batch.path).exists():
                missing.append(batch.path)
                continue
            if manifest is None:
                manifest = load_manifest(plan.manifest_path, plan.manifest_hash)
            result = validate_batch_result(batch.path, campaign.expectation(batch, manifest))
            if campaign.policy.external:
                servers[batch.path] = result.get("policy_server")
            tally.episodes += result["num_episodes"]
            tally.successes += result["success_count"]
            tally.batches_done += 1
            tally.environments[batch.episodes.label] = result.get("environment")
            tally.recorded_failures.extend(
                record
                for record in result["episodes"]
                if not record["success"] and (record.get("extra") or {}).get("video")
            )
        tallies.append(tally)
    check_policy_servers(servers)
    if missing:
        shown = "\n  ".join(missing[:5]) + ("\n  ..." if len(missing) > 5 else "")
        raise IncompleteRunError(
            f"{benchmark}: {len(missing)} batch result(s) missing, the run is incomplete:\n  {shown}\n"
            f"Rerun snakemake to finish them; `{evalwf_command('status', str(campaign.root))}` shows the run so far "
            "(partial)."
        )
    return tallies


def _rate_columns(successes: int, episodes: int) -> dict[str, float]:
    low, high = wilson_interval(successes, episodes)
    rate = successes / episodes if episodes else math.nan
    return {"success_rate": rate, "ci95_low": low, "ci95_high": high, **_percent_columns(rate, low, high)}


def _percent_columns(rate: float, low: float, high: float) -> dict[str, float]:
    """The same numbers in percent, rounded as papers print them (the fractions keep full precision)."""
    return {
        "success_pct": round(100 * rate, 1),
        "ci95_low_pct": round(100 * low, 1),
        "ci95_high_pct": round(100 * high, 1),
    }


def task_table(benchmark: str, tallies: list[TaskTally]) -> pd.DataFrame:
    adapter = get_adapter(benchmark)
    rows = []
    for t in tallies:
        rows.append(
            {
                "benchmark": benchmark,
                **adapter.describe_suite(t.suite),
                "task": t.task,
                "instruction": t.instruction,
                "successes": t.successes,
                "episodes": t.episodes,
                **_rate_columns(t.successes, t.episodes),
                "batches_done": t.batches_done,
                "batches_total": t.batches_total,
                "status": "complete" if t.batches_done == t.batches_total else "partial",
                "manifest_bundle": t.manifest_bundle,  # "" where the manifest was built in this clone
            }
        )
    return pd.DataFrame(rows)


def suite_table(benchmark: str, tallies: list[TaskTally]) -> pd.DataFrame:
    """Per suite (LIBERO) or task config + instruction type (RoboTwin): pooled over tasks, plus the average
    over suites that papers quote."""
    adapter = get_adapter(benchmark)
    rows = []
    for suite in dict.fromkeys(t.suite for t in tallies):
        members = [t for t in tallies if t.suite == suite]
        successes, episodes = sum(t.successes for t in members), sum(t.episodes for t in members)
        complete = all(t.batches_done == t.batches_total for t in members)
        rows.append(
            {
                "benchmark": benchmark,
                **adapter.describe_suite(suite),
                "tasks": len(members),
                "successes": successes,
                "episodes": episodes,
                **_rate_columns(successes, episodes),
                "episodes_total": sum(t.episodes_total for t in members),
                "status": "complete" if complete else "partial",
            }
        )
    table = pd.DataFrame(rows)
    if len(rows) > 1:
        average = {column: "" for column in table.columns}
        # The average of suite rates (what papers quote). With equal episodes per suite it is the pooled rate,
        # whose Wilson interval applies; with unequal suites no binomial interval fits, so none is given.
        equal = table["episodes"].nunique() == 1
        low, high = (
            wilson_interval(int(table["successes"].sum()), int(table["episodes"].sum()))
            if equal
            else (
                math.nan,
                math.nan,
            )
        )
        first_label = next(iter(adapter.describe_suite(tallies[0].suite)))
        average.update(
            {
                "benchmark": benchmark,
                first_label: "average",
                "tasks": int(table["tasks"].sum()),
                "successes": int(table["successes"].sum()),
                "episodes": int(table["episodes"].sum()),
                "success_rate": float(table["success_rate"].mean()),
                "ci95_low": low,
                "ci95_high": high,
                **_percent_columns(float(table["success_rate"].mean()), low, high),
                "episodes_total": int(table["episodes_total"].sum()),
                "status": "complete" if (table["status"] == "complete").all() else "partial",
            }
        )
        table = pd.concat([table, pd.DataFrame([average])], ignore_index=True)
    return table


def tally_environment_lines(benchmark: str, tallies: list[TaskTally]) -> list[str]:
    """What the report says of the environments the tallied batches ran under (evalwf.report.environments)."""
    return environment_lines(
        {
            BatchRef(benchmark, t.suite, t.task, label): record
            for t in tallies
            for label, record in t.environments.items()
        }
    )


def write_csv(table: pd.DataFrame, path: str | Path) -> None:
    atomic_write_text(path, table.to_csv(index=False, float_format="%.4f"))


def summarize_benchmark(
    campaign: PolicyCampaign,
    benchmark: str,
    outputs: dict[str, str],
    echo: bool = True,
    planned: set[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write the gather outputs named in `outputs` (keys as PolicyCampaign.summary_paths) and, with `echo`, print the
    suite, reference and task tables to stderr (the gather step's terminal and log)."""
    from evalwf.report.plots import plot_task_success
    from evalwf.report.tables import format_html, format_latex, format_markdown, format_text, summary_title

    policy = campaign.policy.name if campaign.config.several_policies else None  # whose summary, in a sweep
    tallies = tally_benchmark(campaign, benchmark, planned)
    tasks, suites = task_table(benchmark, tallies), suite_table(benchmark, tallies)
    reported = campaign.reference_scores(benchmark)
    source = campaign.config.reference_source
    comparison = compare_with_reference(benchmark, tallies, reported) if reported else None
    environment = tally_environment_lines(benchmark, tallies)  # flags batches run under several environments
    write_csv(tasks, outputs["tasks"])
    write_csv(suites, outputs["suites"])
    if "reference" in outputs and comparison is not None:
        write_csv(comparison, outputs["reference"])
    if "markdown" in outputs:
        markdown = format_markdown(
            campaign.run, benchmark, suites, tasks, comparison, source, policy=campaign.policy.identity
        )
        atomic_write_text(outputs["markdown"], markdown + environment_markdown(environment))
    if "latex" in outputs:
        atomic_write_text(outputs["latex"], format_latex(campaign.run, benchmark, suites, comparison, source))
    if "plot" in outputs:
        plot_task_success(
            tasks,
            outputs["plot"],
            f"{summary_title(campaign.run, benchmark, policy)}: success rate by task (95% Wilson)",
            reference=reported,
            apart={
                suite: outputs[key] for suite, key in campaign.suites_plotted_apart(benchmark).items() if key in outputs
            },
        )
    if "html" in outputs:
        plot_png = Path(outputs["plot"]).read_bytes() if "plot" in outputs else None
        html = format_html(campaign.run, benchmark, suites, tasks, comparison, source, plot_png, policy)
        html += environment_html(environment)
        if any(tally.recorded_failures for tally in tallies):  # nothing recorded a video: no gallery to build
            from evalwf.report.gallery import failed_episodes, gallery_html

            html += gallery_html(failed_episodes(tallies))
        atomic_write_text(outputs["html"], html)
    if echo:
        text = format_text(campaign.run, benchmark, suites, tasks, comparison, policy)
        print("\n".join([text, *environment]), file=sys.stderr, flush=True)
    return tasks, suites
