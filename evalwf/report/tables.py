"""The summary tables as people read them: printed at the end of a run, summary.md, and a LaTeX booktabs table.

All three are rendered from the same DataFrames the CSVs hold (aggregate.task_table / suite_table and
reference.compare_with_reference), so the numbers cannot disagree. Rates are shown in percent with one decimal.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

TEXT_INSTRUCTION_WIDTH = 60  # the printed per-task table shortens longer instructions; the files keep them whole


def label_columns(table: pd.DataFrame, last: str) -> list[str]:
    """The columns naming a suite (LIBERO/stand-in: suite; RoboTwin: task_config, instruction_type): those
    between 'benchmark' and `last` ('tasks' in the suite table, 'task' in the task table)."""
    columns = list(table.columns)
    return columns[columns.index("benchmark") + 1 : columns.index(last)]


def suite_label(row: pd.Series | dict[str, Any], labels: list[str]) -> str:
    return " / ".join(str(row[c]) for c in labels if str(row[c]) != "")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def pct(value: Any) -> str:
    return f"{value:.1f}" if _finite(value) else "-"


def interval(low: Any, high: Any, sep: str = "-") -> str:
    return f"{low:.1f}{sep}{high:.1f}" if _finite(low) and _finite(high) else "-"


def shorten(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _is_average(row: pd.Series, labels: list[str]) -> bool:
    return bool(labels) and row[labels[0]] == "average"


def suite_rows(suites: pd.DataFrame) -> list[dict[str, str]]:
    """One display row per suite and the average of suites: label, success/trials, %, 95 % interval, done."""
    labels = label_columns(suites, "tasks")
    rows = []
    for _, row in suites.iterrows():
        average = _is_average(row, labels)
        rows.append(
            {
                "suite": "average of suites" if average else suite_label(row, labels),
                "tasks": str(int(row["tasks"])),
                **_success_cells(row),
                "done/total": f"{int(row['episodes'])}/{int(row['episodes_total'])}",
                "status": str(row["status"]),
            }
        )
    return rows


def _success_cells(row: pd.Series) -> dict[str, str]:
    """The columns every table row shows for its episodes: successes of trials, the rate and its 95 % interval."""
    return {
        "success/trials": f"{int(row['successes'])}/{int(row['episodes'])}",
        "success_%": pct(row["success_pct"]),
        "ci95_%": interval(row["ci95_low_pct"], row["ci95_high_pct"]),
    }


def task_rows(tasks: pd.DataFrame, instruction_width: int | None = None) -> list[dict[str, str]]:
    labels = label_columns(tasks, "task")
    rows = []
    for _, row in tasks.iterrows():
        instruction = str(row.get("instruction", "") or "")
        rows.append(
            {
                "suite": suite_label(row, labels),
                "task": str(row["task"]),
                "instruction": shorten(instruction, instruction_width) if instruction_width else instruction,
                **_success_cells(row),
                "batches": f"{int(row['batches_done'])}/{int(row['batches_total'])}",
                "status": str(row["status"]),
            }
        )
    return rows


def comparison_rows(comparison: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    for row in comparison.itertuples():
        inside = "" if row.outside_ci == "" else ("no" if row.outside_ci is True else "yes")
        rows.append(
            {
                "suite": "average of suites" if row.suite == "average" else str(row.suite),
                "reported_%": pct(row.reported_pct),
                "reproduced_%": pct(row.reproduced_pct),
                "difference_pp": f"{row.difference_pp:+.1f}" if _finite(row.difference_pp) else "-",
                "ci95_%": interval(row.ci95_low_pct, row.ci95_high_pct),
                "inside_ci95": inside or "-",
            }
        )
    return rows


def fixed_width(rows: list[dict[str, str]], left: set[str]) -> str:
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}

    def line(values: dict[str, str]) -> str:
        cells = [values[c].ljust(widths[c]) if c in left else values[c].rjust(widths[c]) for c in columns]
        return "  ".join(cells).rstrip()

    return "\n".join([line({c: c for c in columns}), *(line(r) for r in rows)])


def run_status_line(benchmark: str, tasks: pd.DataFrame) -> str:
    done, total = int(tasks["batches_done"].sum()), int(tasks["batches_total"].sum())
    state = "final" if done == total else "PARTIAL, not a final score"
    return (
        f"{benchmark}: {int(tasks['successes'].sum())}/{int(tasks['episodes'].sum())} successes over "
        f"{len(tasks)} tasks, {done}/{total} batches validated ({state})"
    )


def summary_title(run: str, benchmark: str, policy: str | None = None) -> str:
    """'run / benchmark', or 'run / policy / benchmark' for one policy of several: each policy's summary of a
    sweep says whose it is."""
    return " / ".join(part for part in (run, policy, benchmark) if part)


def format_text(
    run: str,
    benchmark: str,
    suites: pd.DataFrame,
    tasks: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    policy: str | None = None,
) -> str:
    """What the gather step prints: the suite table with the average of suites, the reference comparison,
    and the per-task table with each task's instruction. `policy`: the policy's name, for one of several."""
    parts = [
        f"=== {summary_title(run, benchmark, policy)} ===",
        run_status_line(benchmark, tasks),
        "",
        fixed_width(suite_rows(suites), {"suite", "status"}),
    ]
    if comparison is not None and len(comparison):
        parts += ["", "reported vs reproduced:", fixed_width(comparison_rows(comparison), {"suite", "inside_ci95"})]
    parts += ["", fixed_width(task_rows(tasks, TEXT_INSTRUCTION_WIDTH), {"suite", "task", "instruction", "status"})]
    return "\n".join(parts)


# -- Markdown --------------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict[str, str]], headers: dict[str, str], right: set[str]) -> str:
    lines = [
        "| " + " | ".join(headers[c] for c in headers) + " |",
        "|" + "|".join("---:" if c in right else ":---" for c in headers) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(r[c]) for c in headers) + " |" for r in rows]
    return "\n".join(lines)


SUITE_HEADERS = {
    "suite": "Suite",
    "tasks": "Tasks",
    "success/trials": "Successes / trials",
    "success_%": "Success %",
    "ci95_%": "95 % CI (Wilson)",
    "status": "Status",
}
COMPARISON_HEADERS = {
    "suite": "Suite",
    "reported_%": "Reported %",
    "reproduced_%": "Reproduced %",
    "difference_pp": "Difference (pp)",
    "ci95_%": "95 % CI of reproduction",
    "inside_ci95": "Reported inside CI",
}
TASK_HEADERS = {
    "suite": "Suite",
    "task": "Task",
    "instruction": "Instruction",
    "success/trials": "Successes / trials",
    "success_%": "Success %",
    "ci95_%": "95 % CI",
}


# Columns right-aligned in the Markdown and HTML tables.
NUMERIC_COLUMNS = {"tasks", "success/trials", "success_%", "ci95_%", "reported_%", "reproduced_%", "difference_pp"}


def format_markdown(
    run: str,
    benchmark: str,
    suites: pd.DataFrame,
    tasks: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    source: str | None = None,
    policy: str | None = None,
) -> str:
    parts = [f"# {run}: {benchmark}", ""]
    if policy:
        parts += [f"Policy: `{policy}`", ""]
    parts += [
        run_status_line(benchmark, tasks) + ". Success rates in percent with 95 % Wilson score intervals; the "
        "average of suites is the mean of the suite rates (its interval is given when every suite has the same "
        "number of episodes).",
        "",
        "## Suites",
        "",
        markdown_table(suite_rows(suites), SUITE_HEADERS, NUMERIC_COLUMNS),
    ]
    if comparison is not None and len(comparison):
        parts += [
            "",
            f"## Reported vs reproduced{f' ({_md_cell(source)})' if source else ''}",
            "",
            markdown_table(comparison_rows(comparison), COMPARISON_HEADERS, NUMERIC_COLUMNS),
        ]
    parts += ["", "## Tasks", "", markdown_table(task_rows(tasks), TASK_HEADERS, NUMERIC_COLUMNS), ""]
    return "\n".join(parts)


# -- LaTeX -----------------------------------------------------------------------------------------------------

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def _latex_interval(low: Any, high: Any) -> str:
    return f"[{low:.1f}, {high:.1f}]" if _finite(low) and _finite(high) else "--"


def format_latex(
    run: str,
    benchmark: str,
    suites: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    source: str | None = None,
) -> str:
    """A booktabs table: per suite success %, 95 % Wilson interval, trials; the average of suites below a rule;
    with reference scores, the reported score, the difference in pp and whether it lies inside the interval."""
    labels = label_columns(suites, "tasks")
    reference: dict[str, tuple] = {}  # suite -> its row of the comparison (a named tuple)
    if comparison is not None:
        reference = {row.suite: row for row in comparison.itertuples()}
    with_reference = bool(reference)
    header = ["Suite", r"Success (\%)", r"95\,\% CI", "Trials"]
    if with_reference:
        header += [r"Reported (\%)", r"$\Delta$ (pp)", r"In CI"]
    body, average = [], []
    for _, row in suites.iterrows():
        is_average = _is_average(row, labels)
        key = "average" if is_average else "-".join(str(row[c]) for c in labels)
        cells = [
            "Average" if is_average else latex_escape(suite_label(row, labels)),
            pct(row["success_pct"]),
            _latex_interval(row["ci95_low_pct"], row["ci95_high_pct"]),
            str(int(row["episodes"])),
        ]
        if with_reference:
            ref = reference.get(key)
            if ref is None:
                cells += ["--", "--", "--"]
            else:
                inside = "--" if ref.outside_ci == "" else ("no" if ref.outside_ci is True else "yes")
                cells += [pct(ref.reported_pct), f"{ref.difference_pp:+.1f}", inside]
        (average if is_average else body).append(" & ".join(cells) + r" \\")
    caption = (
        f"{latex_escape(benchmark)} success rates of run \\texttt{{{latex_escape(run)}}} with 95\\,\\% Wilson "
        "score intervals; the average is the mean of the suite rates"
    )
    if with_reference:
        caption += (
            "; reported scores" + (f" from {latex_escape(source)}" if source else "") + ", difference "
            "reproduced $-$ reported in percentage points, and whether the reported score lies inside the interval"
        )
    lines = [
        r"% requires \usepackage{booktabs}",
        r"\begin{table}[t]",
        r"\centering",
        f"\\caption{{{caption}.}}",
        f"\\label{{tab:{latex_escape(run)}-{latex_escape(benchmark)}}}".replace(r"\_", "-"),
        r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *body,
    ]
    if average:
        lines += [r"\midrule", *average]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


# -- HTML (the report's landing page) --------------------------------------------------------------------------


def html_table(rows: list[dict[str, str]], headers: dict[str, str], right: set[str]) -> str:
    from html import escape

    head = "".join(f"<th>{escape(headers[c])}</th>" for c in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td style="{"text-align:right;white-space:nowrap" if c in right else "text-align:left"}">'
            f"{escape(str(r[c]))}</td>"
            for c in headers
        )
        + "</tr>"
        for r in rows
    )
    return f'<table class="evalwf-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def format_html(
    run: str,
    benchmark: str,
    suites: pd.DataFrame,
    tasks: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    source: str | None = None,
    plot_png: bytes | None = None,
    policy: str | None = None,
) -> str:
    """A self-contained HTML fragment (tables and the plot inlined), shown under the benchmark's category of the
    report. `policy`: the policy's name, for one of several."""
    import base64
    from html import escape

    style = (
        "<style>.evalwf-table{border-collapse:collapse;margin:0.5em 0 1.2em 0;font-size:0.9em}"
        ".evalwf-table th,.evalwf-table td{border-bottom:1px solid #ddd;padding:2px 8px}"
        ".evalwf-table th{border-bottom:2px solid #444;text-align:left}</style>"
    )
    parts = [
        style,
        f'<div class="evalwf-summary"><h2>{escape(summary_title(run, benchmark, policy))}</h2>',
        f"<p>{escape(run_status_line(benchmark, tasks))}. Success in percent with 95 % Wilson intervals.</p>",
        "<h3>Suites</h3>",
        html_table(suite_rows(suites), SUITE_HEADERS, NUMERIC_COLUMNS),
    ]
    if comparison is not None and len(comparison):
        title = "Reported vs reproduced" + (f" ({escape(source)})" if source else "")
        parts += [f"<h3>{title}</h3>", html_table(comparison_rows(comparison), COMPARISON_HEADERS, NUMERIC_COLUMNS)]
    if plot_png:
        encoded = base64.b64encode(plot_png).decode("ascii")
        parts += [
            "<h3>Success by task</h3>",
            f'<img alt="success rate by task" style="max-width:100%" src="data:image/png;base64,{encoded}"/>',
        ]
    parts += ["<h3>Tasks</h3>", html_table(task_rows(tasks), TASK_HEADERS, NUMERIC_COLUMNS), "</div>"]
    return "\n".join(parts) + "\n"
