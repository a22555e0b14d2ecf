"""Compare two finished runs (two checkpoints, or two dates of one): `evalwf compare RUN_A RUN_B`.

RUN_A and RUN_B are run directories (results/<run>). For every benchmark both runs summarised, it prints the
per-suite and per-task success rates of both, the difference B - A in percentage points with a 95 % interval
for a difference of two independent proportions by Newcombe's hybrid score method (Newcombe 1998, method 10:
built from the two Wilson intervals), and flags a difference as significant when that interval excludes 0.
`--out DIR` also writes comparison.csv and comparison.md there.

Only complete summaries are compared (the gather step writes none for a partial run); suites or tasks present
in one run only are listed as such. When the two runs' batches ran under different environments (simulator
packages, GPU, driver, CUDA, renderer, CPU: what every batch records), it warns first, naming the fields that
differ (evalwf/report/environments.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from evalwf.benchmark.adapter import get_adapter
from evalwf.common.atomic import atomic_write_text
from evalwf.report.environments import RunEnvironments, comparison_warnings, run_environments
from evalwf.report.stats import Z_95, wilson_interval
from evalwf.report.tables import fixed_width, label_columns, markdown_table, shorten

COLUMNS = [
    "benchmark",
    "level",
    "suite",
    "task",
    "instruction",
    "successes_a",
    "episodes_a",
    "success_pct_a",
    "successes_b",
    "episodes_b",
    "success_pct_b",
    "difference_pp",
    "ci95_low_pp",
    "ci95_high_pp",
    "significant",
]


def newcombe_interval(x1: int, n1: int, x2: int, n2: int, z: float = Z_95) -> tuple[float, float, float]:
    """(p1 - p2, lower, upper): Newcombe's hybrid score interval for the difference of two independent
    proportions (Newcombe 1998, Statistics in Medicine 17:873-890, method 10), from the Wilson intervals
    (l1, u1) and (l2, u2): lower = d - sqrt((p1-l1)^2 + (u2-p2)^2), upper = d + sqrt((u1-p1)^2 + (p2-l2)^2)."""
    if n1 <= 0 or n2 <= 0:
        return (math.nan, math.nan, math.nan)
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson_interval(x1, n1, z)
    l2, u2 = wilson_interval(x2, n2, z)
    difference = p1 - p2
    lower = difference - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    upper = difference + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return (difference, max(-1.0, lower), min(1.0, upper))


def _read_run(run_dir: Path, partial: bool = False) -> dict[str, Any]:
    """benchmark -> (suite table without the average row, task table, suite label columns); plus the policy.

    `partial`: a summary marked partial is compared too (a policy an adaptive sweep dropped: what it evaluated)."""
    if not run_dir.is_dir():
        raise SystemExit(f"{run_dir} is not a run directory (results/<run>)")
    found: dict[str, Any] = {}
    environments: RunEnvironments = {}
    for directory in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        tasks_csv = directory / "task_summary.csv"
        if not tasks_csv.exists():
            continue
        try:
            suites_csv = directory / get_adapter(directory.name).summary_file
        except KeyError:
            continue
        tasks = pd.read_csv(tasks_csv, keep_default_na=False, dtype={"task": str})
        suites = pd.read_csv(suites_csv, keep_default_na=False)
        labels = label_columns(suites, "tasks")
        suites = suites[suites[labels[0]] != "average"]
        if not partial and ((tasks["status"] != "complete").any() or (suites["status"] != "complete").any()):
            raise SystemExit(f"{directory}: the summary is partial; finish the run before comparing it")
        found[directory.name] = (suites, tasks, labels)
        environments.update(run_environments(directory, directory.name))
    if not found:
        if policies := _policy_directories(run_dir):
            raise SystemExit(
                f"{run_dir} is a run of several policies ({', '.join(policies)}): compare one policy with another, "
                f"e.g. `evalwf compare {run_dir / policies[0]} <other run or policy directory>`; the run's own "
                f"comparison of its policies is in {run_dir / 'comparison'}/<benchmark>/"
            )
        raise SystemExit(f"{run_dir}: no summaries (task_summary.csv) yet; has the run finished?")
    return {"benchmarks": found, "environments": environments, **_policy_of(run_dir)}


def _policy_directories(run_dir: Path) -> list[str]:
    """The policies of a several-policy run (results/<run>/<policy>/<benchmark>/task_summary.csv)."""
    return [
        policy.name
        for policy in sorted(p for p in run_dir.iterdir() if p.is_dir())
        if any(policy.glob("*/task_summary.csv"))
    ]


def _policy_of(directory: Path) -> dict[str, str]:
    """The name and policy identity a run directory shows: a run's own snapshot, or for one policy's directory of a
    several-policy run (results/<run>/<policy>) the run's snapshot and that policy's identity in it."""
    snapshot = directory / "campaign.yaml"
    if snapshot.exists():
        return {"name": directory.name, "policy": yaml.safe_load(snapshot.read_text()).get("policy_identity", "")}
    snapshot = directory.parent / "campaign.yaml"
    if snapshot.exists():
        identities = yaml.safe_load(snapshot.read_text()).get("policy_identities") or {}
        name = f"{directory.parent.name}/{directory.name}"
        return {"name": name, "policy": identities.get(directory.name, "")}
    return {"name": directory.name, "policy": ""}


def _row(benchmark: str, level: str, suite: str, task: str, instruction: str, a: Any, b: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"benchmark": benchmark, "level": level, "suite": suite, "task": task}
    row["instruction"] = instruction
    for tag, counts in (("a", a), ("b", b)):
        successes, episodes = counts if counts is not None else (None, None)
        row[f"successes_{tag}"], row[f"episodes_{tag}"] = successes, episodes
        row[f"success_pct_{tag}"] = round(100 * successes / episodes, 1) if episodes else math.nan
    if a is None or b is None or not a[1] or not b[1]:
        row.update(difference_pp=math.nan, ci95_low_pp=math.nan, ci95_high_pp=math.nan)
        row["significant"] = "only in A" if b is None else ("only in B" if a is None else "")
        return row
    difference, low, high = newcombe_interval(b[0], b[1], a[0], a[1])  # B - A
    row.update(
        difference_pp=round(100 * difference, 1),
        ci95_low_pp=round(100 * low, 1),
        ci95_high_pp=round(100 * high, 1),
        significant="yes" if low > 0 or high < 0 else "no",
    )
    return row


def compare_runs(
    run_a: Path, run_b: Path, partial: bool = False
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, Any]]:
    """One row per suite (level 'suite'), per benchmark the average of suites (level 'average', with an interval
    only when every suite of both runs has the same number of episodes, so that it is a pooled proportion), and
    per task (level 'task')."""
    a, b = _read_run(run_a, partial), _read_run(run_b, partial)
    rows = []
    for benchmark in [name for name in a["benchmarks"] if name in b["benchmarks"]]:
        suites_a, tasks_a, labels = a["benchmarks"][benchmark]
        suites_b, tasks_b, _ = b["benchmarks"][benchmark]

        def counts(table: pd.DataFrame, key_columns: list[str]) -> dict[tuple, tuple[int, int]]:
            return {
                tuple(str(r[c]) for c in key_columns): (int(r["successes"]), int(r["episodes"]))
                for _, r in table.iterrows()
            }

        suite_a, suite_b = counts(suites_a, labels), counts(suites_b, labels)
        for key in dict.fromkeys([*suite_a, *suite_b]):
            label = " / ".join(k for k in key if k)
            rows.append(_row(benchmark, "suite", label, "", "", suite_a.get(key), suite_b.get(key)))
        shared = [k for k in suite_a if k in suite_b]
        if len(shared) > 1:
            pooled_a = tuple(map(sum, zip(*(suite_a[k] for k in shared), strict=True)))
            pooled_b = tuple(map(sum, zip(*(suite_b[k] for k in shared), strict=True)))
            equal = len({suite_a[k][1] for k in shared} | {suite_b[k][1] for k in shared}) == 1
            average = _row(benchmark, "average", "average of suites", "", "", pooled_a, pooled_b)
            if not equal:  # the mean of unequal suite rates is no binomial proportion: difference only
                mean_a = sum(suite_a[k][0] / suite_a[k][1] for k in shared) / len(shared)
                mean_b = sum(suite_b[k][0] / suite_b[k][1] for k in shared) / len(shared)
                average.update(
                    success_pct_a=round(100 * mean_a, 1),
                    success_pct_b=round(100 * mean_b, 1),
                    difference_pp=round(100 * (mean_b - mean_a), 1),
                    ci95_low_pp=math.nan,
                    ci95_high_pp=math.nan,
                    significant="",
                )
            rows.append(average)
        task_labels = label_columns(tasks_a, "task")
        task_a, task_b = counts(tasks_a, [*task_labels, "task"]), counts(tasks_b, [*task_labels, "task"])
        instructions = {
            tuple(str(r[c]) for c in [*task_labels, "task"]): str(r.get("instruction", ""))
            for table in (tasks_b, tasks_a)
            for _, r in table.iterrows()
        }
        for key in dict.fromkeys([*task_a, *task_b]):
            suite = " / ".join(k for k in key[:-1] if k)
            rows.append(
                _row(benchmark, "task", suite, key[-1], instructions.get(key, ""), task_a.get(key), task_b.get(key))
            )
    return pd.DataFrame(rows, columns=COLUMNS), a, b


def _display(table: pd.DataFrame, level: set[str], width: int | None) -> list[dict[str, str]]:
    def pct(value: Any) -> str:
        return "-" if pd.isna(value) else f"{value:.1f}"

    rows = []
    for _, r in table[table["level"].isin(level)].iterrows():
        row = {"benchmark": r["benchmark"], "suite": r["suite"]}
        if "task" in level:
            row["task"] = r["task"]
            row["instruction"] = shorten(r["instruction"], width) if width else r["instruction"]
        row.update(
            {
                "A %": f"{pct(r['success_pct_a'])} ({_counts(r, 'a')})",
                "B %": f"{pct(r['success_pct_b'])} ({_counts(r, 'b')})",
                "B-A pp": "-" if pd.isna(r["difference_pp"]) else f"{r['difference_pp']:+.1f}",
                "95% CI (Newcombe)": (
                    "-" if pd.isna(r["ci95_low_pp"]) else f"[{r['ci95_low_pp']:+.1f}, {r['ci95_high_pp']:+.1f}]"
                ),
                "significant": r["significant"] or "-",
            }
        )
        rows.append(row)
    return rows


def _counts(row: pd.Series, tag: str) -> str:
    episodes = row[f"episodes_{tag}"]
    return "-" if episodes is None or pd.isna(episodes) else f"{int(row[f'successes_{tag}'])}/{int(episodes)}"


def _header(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"A: {a['name']} ({a['policy']})", f"B: {b['name']} ({b['policy']})"]


def environment_warnings(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The warnings when the runs' environments differ, for the benchmarks both summarised."""
    shared = set(a["benchmarks"]) & set(b["benchmarks"])

    def of(run: dict[str, Any]) -> RunEnvironments:
        return {ref: record for ref, record in run["environments"].items() if ref.benchmark in shared}

    return comparison_warnings("A", of(a), "B", of(b))


def format_text(table: pd.DataFrame, a: dict[str, Any], b: dict[str, Any]) -> str:
    significant = table[(table["significant"] == "yes")]
    return "\n".join(
        [
            *_header(a, b),
            *environment_warnings(a, b),
            "difference B - A in percentage points; 95% interval by Newcombe's hybrid score method",
            "",
            fixed_width(_display(table, {"suite", "average"}, None), {"benchmark", "suite", "significant"}),
            "",
            fixed_width(_display(table, {"task"}, 50), {"benchmark", "suite", "task", "instruction", "significant"}),
            "",
            f"{len(significant)} significant difference(s): "
            + (", ".join(f"{r.suite}/{r.task}" if r.task else r.suite for r in significant.itertuples()) or "none"),
        ]
    )


def format_markdown(table: pd.DataFrame, a: dict[str, Any], b: dict[str, Any]) -> str:
    right = {"A %", "B %", "B-A pp", "95% CI (Newcombe)"}
    suites = _display(table, {"suite", "average"}, None)
    tasks = _display(table, {"task"}, None)
    return "\n".join(
        [
            f"# {a['name']} vs {b['name']}",
            "",
            *(f"- {line}" for line in _header(a, b)),
            "",
            *(["```text", *environment_warnings(a, b), "```", ""] if environment_warnings(a, b) else []),
            "Difference B - A in percentage points with a 95 % interval for the difference of two proportions "
            "(Newcombe's hybrid score method); significant when the interval excludes 0.",
            "",
            "## Suites",
            "",
            markdown_table(suites, {c: c for c in suites[0]} if suites else {}, right) if suites else "(none)",
            "",
            "## Tasks",
            "",
            markdown_table(tasks, {c: c for c in tasks[0]} if tasks else {}, right) if tasks else "(none)",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_a", type=Path, help="results/<run> of the baseline")
    parser.add_argument("run_b", type=Path, help="results/<run> compared with it")
    parser.add_argument("--out", type=Path, help="also write comparison.csv and comparison.md in this directory")
    args = parser.parse_args(argv)
    table, a, b = compare_runs(args.run_a, args.run_b)
    if table.empty:
        print(f"{args.run_a} and {args.run_b} share no summarised benchmark", file=sys.stderr)
        return 1
    print(format_text(table, a, b))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "comparison.csv", table.to_csv(index=False))
        atomic_write_text(args.out / "comparison.md", format_markdown(table, a, b))
        print(f"\nwrote {args.out / 'comparison.csv'} and {args.out / 'comparison.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
