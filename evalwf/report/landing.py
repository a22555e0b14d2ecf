"""The report's landing page: the answer first. Per benchmark and suite the success with its 95 % Wilson interval,
episodes done of planned and the status, then the plot; for a campaign of several policies the comparison across
policies (table and success-by-policy plot) comes before every policy's own headline, each labelled with the
policy's name; a benchmark whose batches ran under several environments says so under its table, with which batches
ran under which (evalwf/report/environments.py). workflow/report/workflow.rst includes the fragment this writes
(landing.html) under the title.

Read from the summaries' and comparisons' own files (CSV and PNG), so the page shows exactly what they hold.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

import pandas as pd

from evalwf.common.atomic import atomic_write_text
from evalwf.plan.budget import campaign_cost_line
from evalwf.plan.campaign import Campaign, PolicyCampaign
from evalwf.report.environments import environment_lines, group_batches, run_environments
from evalwf.report.policy_comparison import comparison_cells
from evalwf.report.tables import (
    COMPARISON_HEADERS,
    NUMERIC_COLUMNS,
    comparison_rows,
    html_table,
    label_columns,
    suite_rows,
    summary_title,
)

HEADLINE_HEADERS = {
    "suite": "Suite",
    "success_%": "Success %",
    "ci95_%": "95 % CI (Wilson)",
    "success/trials": "Successes / trials",
    "done/total": "Episodes done / planned",
    "status": "Status",
}
HEADLINE_RIGHT = {"success_%", "ci95_%", "success/trials", "done/total"}
COMPARISON_RIGHT = {"success %", "95% CI (Wilson)", "vs baseline pp", "95% CI (Newcombe)"}


def comparison_anchor(benchmark: str) -> str:
    """The id of a benchmark's comparison heading (the browser test looks for it above the fold)."""
    return f"evalwf-comparison-{benchmark}"


def _image(path: str, alt: str) -> str:
    """A PNG inlined at its own size, shrunk (never enlarged) to the column's width."""
    png = Path(path).read_bytes()
    encoded = base64.b64encode(png).decode("ascii")
    width = int.from_bytes(png[16:20], "big")  # the IHDR chunk's width field
    return (
        f'<img class="evalwf-plot" alt="{escape(alt)}" style="width:100%;max-width:{width}px;height:auto" '
        f'src="data:image/png;base64,{encoded}"/>'
    )


def _suite_table(path: str) -> pd.DataFrame:
    table = pd.read_csv(path)
    labels = label_columns(table, "tasks")
    table[labels] = table[labels].fillna("").astype(str)  # the average row leaves the other label columns empty
    return table


def headline(member: PolicyCampaign, benchmark: str, policy: str | None) -> str:
    """One policy's result on one benchmark: the suite table (done/total, status) and its plot."""
    paths = member.summary_paths(benchmark)
    title = summary_title(member.run, benchmark, policy)
    parts = [
        f"<h3>{escape(title)}</h3>",
        html_table(suite_rows(_suite_table(paths["suites"])), HEADLINE_HEADERS, HEADLINE_RIGHT),
    ]
    recorded = run_environments(member.benchmark_dir(benchmark), benchmark)
    if len(group_batches(recorded)) > 1:  # the answer comes with its caveat: batches ran under several environments
        lines = environment_lines(recorded)
        parts.append(f'<pre class="evalwf-environments">{escape(chr(10).join(lines))}</pre>')
    if "reference" in paths and Path(paths["reference"]).exists():
        # the CSV holds True / False / '' (no interval): read back as the table that was written
        reference = pd.read_csv(paths["reference"], converters={"outside_ci": {"True": True, "False": False}.get})
        reference["outside_ci"] = reference["outside_ci"].map(lambda value: "" if value is None else value)
        source = member.config.reference_source
        parts += [
            f"<h4>Reported vs reproduced{f' ({escape(source)})' if source else ''}</h4>",
            html_table(comparison_rows(reference), COMPARISON_HEADERS, NUMERIC_COLUMNS),
        ]
    plots = [key for key in paths if key == "plot" or key.startswith("plot_")]
    parts += [_image(paths[key], f"{title}: success rate by task") for key in plots if Path(paths[key]).exists()]
    return "\n".join(parts)


def comparison(campaign: Campaign, benchmark: str) -> str:
    """The policies of one benchmark side by side: suites and the average, then the success-by-policy plot."""
    paths = campaign.comparison_paths(benchmark)
    table = pd.read_csv(paths["suites"])
    cells = comparison_cells(table, with_task=False)
    baseline = campaign.baseline_of(benchmark)
    return "\n".join(
        [
            f'<h2 id="{comparison_anchor(benchmark)}">Policies compared on {escape(benchmark)} '
            f"(baseline {escape(baseline)})</h2>",
            "<p>Success with its 95 % Wilson interval; the difference to the baseline in percentage points with a "
            "95 % Newcombe interval (significant when it excludes 0).</p>",
            html_table(cells, {column: column for column in cells[0]}, COMPARISON_RIGHT) if cells else "",
            _image(paths["plot"], f"{benchmark}: success by policy"),
        ]
    )


def landing_html(campaign: Campaign) -> str:
    """The landing fragment: comparisons first (several policies), then each policy's headline per benchmark."""
    parts = ['<div class="evalwf-landing">']
    compared = campaign.compared_benchmarks() if campaign.multi else []
    parts += [comparison(campaign, benchmark) for benchmark in compared]
    if campaign.multi:
        parts.append("<h2>Each policy</h2>")
    else:
        parts.append("<h2>Results</h2>")
    for member in campaign.policy_campaigns():
        policy = member.policy.name if campaign.multi else None
        parts += [headline(member, benchmark, policy) for benchmark in member.benchmarks]
    cost = campaign_cost_line(campaign)  # the plan recorded at submission against the batch records' times
    parts.append(f'<p class="evalwf-cost">Cost: {escape(cost)} (GPU-hours of simulation, docs/performance.md)</p>')
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def write_landing(campaign: Campaign, output: str) -> None:
    atomic_write_text(output, landing_html(campaign))
