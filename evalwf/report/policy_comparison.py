"""The policies that evaluate one benchmark of a campaign side by side: per suite (and the average of suites) and
per task, each policy's success with its 95 % Wilson interval and its difference to the benchmark's baseline policy
with a 95 % interval by Newcombe's hybrid score method. The pairwise numbers are evalwf.report.compare's (compare_runs
on the baseline's and the policy's folders, <results_dir>/<run>/<policy>/): this module only lays them out.

Writes policy_comparison.csv (suites and the average), policy_comparison_tasks.csv, policy_comparison.md and
success_by_policy.png (success per policy per suite: a training curve when the policies are steps of one run).
"""

from __future__ import annotations

import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from evalwf.common.atomic import atomic_write_bytes, atomic_write_text
from evalwf.plan.campaign import Campaign
from evalwf.plan.rounds import adaptive_benchmarks
from evalwf.report.adaptive import sweep_outcome
from evalwf.report.compare import compare_runs
from evalwf.report.stats import wilson_interval
from evalwf.report.tables import markdown_table

COLUMNS = [
    "benchmark",
    "level",
    "suite",
    "task",
    "instruction",
    "policy",
    "policy_identity",
    "baseline",
    "successes",
    "episodes",
    "success_pct",
    "wilson_low_pct",
    "wilson_high_pct",
    "difference_pp",
    "ci95_low_pp",
    "ci95_high_pp",
    "significant",
]


# With `adaptive:`: what the sweep did with each policy (evalwf.report.adaptive.sweep_outcome)
ADAPTIVE_COLUMNS = [
    "adaptive",
    "episodes_per_task",
    "episodes_spent",  # all tasks, with speculative batches discarded after a drop (speculate_rounds)
    "discarded_episodes",
    "episodes_full",  # all tasks, had it run every round
    "e_value",
    "e_threshold",
    "e_against",
    "anytime_vs",
    "anytime_low_pp",
    "anytime_high_pp",
    "anytime_level",
]


def _pct(value: float) -> float:
    return math.nan if math.isnan(value) else round(100 * value, 1)


def comparison_table(campaign: Campaign, benchmark: str) -> pd.DataFrame:
    """One row per (suite, average or task) x policy, in config order; the baseline's difference columns empty."""
    baseline_name = campaign.baseline_of(benchmark)
    baseline = campaign.member(baseline_name)
    adaptive = sweep_outcome(campaign, benchmark) if benchmark in adaptive_benchmarks(campaign) else None
    rows = []
    for member in campaign.policies_of(benchmark):
        name = member.policy.name
        # B - A = this policy - baseline (Newcombe); a policy an adaptive sweep dropped: what it evaluated
        pairs, _, _ = compare_runs(baseline.out, member.out, partial=adaptive is not None)
        for r in pairs[pairs["benchmark"] == benchmark].to_dict("records"):
            successes, episodes = r["successes_b"], r["episodes_b"]
            counted = episodes is not None and not pd.isna(episodes) and episodes > 0
            low, high = wilson_interval(int(successes), int(episodes)) if counted else (math.nan, math.nan)
            if r["level"] == "average" and pd.isna(r["ci95_low_pp"]):  # mean of unequal suites: no interval
                low, high = math.nan, math.nan
            is_baseline = name == baseline_name
            rows.append(
                {
                    "benchmark": benchmark,
                    "level": r["level"],
                    "suite": r["suite"],
                    "task": r["task"],
                    "instruction": r["instruction"],
                    "policy": name,
                    "policy_identity": member.policy.identity,
                    "baseline": baseline_name,
                    "successes": int(successes) if counted else None,
                    "episodes": int(episodes) if counted else None,
                    "success_pct": r["success_pct_b"],
                    "wilson_low_pct": _pct(low),
                    "wilson_high_pct": _pct(high),
                    "difference_pp": math.nan if is_baseline else r["difference_pp"],
                    "ci95_low_pp": math.nan if is_baseline else r["ci95_low_pp"],
                    "ci95_high_pp": math.nan if is_baseline else r["ci95_high_pp"],
                    "significant": "baseline" if is_baseline else r["significant"],
                    **(adaptive[name] if adaptive else {}),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS + (ADAPTIVE_COLUMNS if adaptive else []))


def comparison_cells(table: pd.DataFrame, with_task: bool) -> list[dict[str, str]]:
    def num(value: Any, fmt: str) -> str:
        return "-" if pd.isna(value) else format(value, fmt)

    out = []
    for _, r in table.iterrows():
        row = {"suite": str(r["suite"])}
        if with_task:
            row["task"] = str(r["task"])
        counts = "-" if pd.isna(r["episodes"]) else f"{int(r['successes'])}/{int(r['episodes'])}"
        row.update(
            {
                "policy": str(r["policy"]),
                "success %": f"{num(r['success_pct'], '.1f')} ({counts})",
                "95% CI (Wilson)": (
                    "-" if pd.isna(r["wilson_low_pct"]) else f"[{r['wilson_low_pct']:.1f}, {r['wilson_high_pct']:.1f}]"
                ),
                "vs baseline pp": num(r["difference_pp"], "+.1f"),
                "95% CI (Newcombe)": (
                    "-" if pd.isna(r["ci95_low_pp"]) else f"[{r['ci95_low_pp']:+.1f}, {r['ci95_high_pp']:+.1f}]"
                ),
                "significant": "-" if pd.isna(r["significant"]) or not r["significant"] else str(r["significant"]),
            }
        )
        out.append(row)
    return out


def format_markdown(campaign: Campaign, benchmark: str, table: pd.DataFrame) -> str:
    right = {"success %", "95% CI (Wilson)", "vs baseline pp", "95% CI (Newcombe)"}
    suites = comparison_cells(table[table["level"].isin(["suite", "average"])], with_task=False)
    tasks = comparison_cells(table[table["level"] == "task"], with_task=True)
    identities = [f"- {member.policy.name}: {member.policy.identity}" for member in campaign.policies_of(benchmark)]
    return "\n".join(
        [
            f"# {campaign.run} / {benchmark}: policies compared (baseline {campaign.baseline_of(benchmark)})",
            "",
            *identities,
            "",
            "Success with its 95 % Wilson interval; difference to the baseline in percentage points with a 95 % "
            "interval for the difference of two proportions (Newcombe's hybrid score method); significant when "
            "that interval excludes 0.",
            "",
            "## Suites",
            "",
            markdown_table(suites, {c: c for c in suites[0]}, right) if suites else "(none)",
            "",
            *_adaptive_section(table),
            "## Tasks",
            "",
            markdown_table(tasks, {c: c for c in tasks[0]}, right) if tasks else "(none)",
            "",
        ]
    )


def _adaptive_section(table: pd.DataFrame) -> list[str]:
    """What an adaptive sweep did with each policy; nothing without `adaptive:`."""
    if "adaptive" not in table.columns:
        return []
    rows = []
    for _, r in table.drop_duplicates("policy").iterrows():
        dropped = not pd.isna(r["e_value"])
        rows.append(
            {
                "policy": str(r["policy"]),
                "episodes per task": str(r["episodes_per_task"]),
                "adaptive": str(r["adaptive"]) + (" (partial: no final score)" if dropped else ""),
                "e-value / threshold": (
                    f"{r['e_value']:.1f} / {r['e_threshold']:.1f} vs {r['e_against']}" if dropped else "-"
                ),
                "anytime-valid CI pp": (
                    "-"
                    if not r["anytime_vs"]
                    else f"[{r['anytime_low_pp']:+.1f}, {r['anytime_high_pp']:+.1f}] vs {r['anytime_vs']}"
                ),
            }
        )
    level = float(table["anytime_level"].iloc[0])
    policies = table.drop_duplicates("policy")
    spent, full = int(policies["episodes_spent"].sum()), int(policies["episodes_full"].sum())
    discarded = int(policies["discarded_episodes"].sum())
    return [
        "## Adaptive rounds",
        "",
        "A dropped policy stopped once its e-value reached the threshold (docs/adaptive.md); its numbers above cover "
        f"what it evaluated. The anytime-valid interval is for (policy - reference) at level {level:.4g} per pair, "
        "valid under the sweep's stopping; the Wilson and Newcombe intervals above are fixed-sample ones.",
        "",
        f"Episodes spent: {spent} of {full} for every policy in every round ({100 * (1 - spent / full):.1f} % saved)"
        + (
            f", {discarded} of them in speculative batches discarded when their policy was dropped (never counted)"
            if discarded
            else ""
        )
        + ".",
        "",
        markdown_table(rows, {c: c for c in rows[0]}, {"episodes per task"}),
        "",
    ]


def plot_success_by_policy(campaign: Campaign, benchmark: str, table: pd.DataFrame) -> bytes:
    """The PNG of success_by_policy_figure."""
    figure = success_by_policy_figure(campaign, benchmark, table)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def success_by_policy_figure(campaign: Campaign, benchmark: str, table: pd.DataFrame) -> Figure:
    """Success per policy (x, config order) per suite (one line each) with Wilson error bars."""
    names = [member.policy.name for member in campaign.policies_of(benchmark)]
    suites = table[table["level"] == "suite"]
    title = f"{campaign.run} / {benchmark}: success per policy (baseline {campaign.baseline_of(benchmark)})"
    # wide enough for the title and the policy names (about 0.1 inch per character at the default 10 pt)
    figure, axis = plt.subplots(figsize=(max(5.0, 1.4 * len(names) + 2, 0.1 * len(title) + 1), 4))
    for suite, rows in suites.groupby("suite", sort=False):
        rows = rows.set_index("policy").reindex(names)
        y = rows["success_pct"].astype(float)
        below = (y - rows["wilson_low_pct"].astype(float)).clip(lower=0)
        above = (rows["wilson_high_pct"].astype(float) - y).clip(lower=0)
        axis.errorbar(range(len(names)), y, yerr=[below, above], marker="o", capsize=3, label=str(suite))
    if "adaptive" in table.columns:  # a dropped policy is marked where it stands
        status = table.drop_duplicates("policy").set_index("policy")["adaptive"]
        labels = [f"{name}\n({status[name]})" if status[name].startswith("dropped") else name for name in names]
    else:
        labels = names
    axis.set_xticks(range(len(names)), labels, rotation=20, ha="right")
    axis.set_ylim(-2, 102)
    axis.set_ylabel("success % (95% Wilson)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    figure.tight_layout()
    return figure


def write_policy_comparison(campaign: Campaign, benchmark: str, paths: dict[str, str]) -> pd.DataFrame:
    """Write the outputs Campaign.comparison_paths names, print the suite table; the table is returned."""
    table = comparison_table(campaign, benchmark)
    suites = table[table["level"].isin(["suite", "average"])]
    atomic_write_text(paths["suites"], suites.to_csv(index=False))
    atomic_write_text(paths["tasks"], table[table["level"] == "task"].to_csv(index=False))
    markdown = format_markdown(campaign, benchmark, table)
    atomic_write_text(paths["markdown"], markdown)
    atomic_write_bytes(paths["plot"], plot_success_by_policy(campaign, benchmark, table))
    print(markdown.split("## Tasks")[0], flush=True)
    return table
