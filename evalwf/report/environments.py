"""Which environments a run's batches ran under (the `environment` each batch records: evalwf.plan.batch_environment),
in words: `evalwf status` and the report flag a run whose batches ran under more than one (which batches under
which, grouped compactly), and `evalwf compare` warns when two runs' environments differ, naming the fields.

A batch file written before batches recorded their environment is "not recorded": it is never taken for the
same environment as a recorded one, nor for a different one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from evalwf.plan.batch_environment import ENVIRONMENT_KEY, BatchEnvironment

NOT_RECORDED = "not recorded"
# The fields that make two environments different (why_null only explains a null)
FIELDS = ("python", "cpu_model", "gpu_model", "gpu_driver", "cuda_version", "renderer")
SHOWN_TASKS = 6  # per environment, the tasks listed before "... and N more"


@dataclass(frozen=True, order=True)
class BatchRef:
    """One batch of a run, named as status names it."""

    benchmark: str
    suite: str
    task: str
    label: str  # its episode range, e.g. 0000-3


def flat(record: BatchEnvironment | None) -> dict[str, str] | None:
    """field -> value of an environment (packages as `packages.<name>`; null as "null"); None: not recorded."""
    if not isinstance(record, dict):
        return None
    values = {key: str(record.get(key)) if record.get(key) is not None else "null" for key in FIELDS}
    for name, version in sorted((record.get("packages") or {}).items()):
        values[f"packages.{name}"] = version if version is not None else "null"
    return values


def environment_key(record: BatchEnvironment | None) -> str:
    """Equal for batches of the same environment; NOT_RECORDED for a file without one."""
    values = flat(record)
    return NOT_RECORDED if values is None else json.dumps(values, sort_keys=True)


@dataclass
class EnvironmentGroup:
    """The batches of a run that ran under one environment."""

    key: str
    values: dict[str, str] | None  # flat(record); None: not recorded
    batches: list[BatchRef] = field(default_factory=list)


def group_batches(batches: dict[BatchRef, BatchEnvironment | None]) -> list[EnvironmentGroup]:
    """The batches grouped by environment, the largest group first (recorded before not recorded on a tie)."""
    groups: dict[str, EnvironmentGroup] = {}
    for ref, record in sorted(batches.items()):
        key = environment_key(record)
        groups.setdefault(key, EnvironmentGroup(key, flat(record))).batches.append(ref)
    return sorted(groups.values(), key=lambda g: (-len(g.batches), g.values is None, g.key))


def differing_fields(values: list[dict[str, str]]) -> list[str]:
    """The fields whose value is not the same in every one of `values` (a missing package field counts)."""
    order = {name: index for index, name in enumerate(FIELDS)}
    names = sorted({name for one in values for name in one}, key=lambda n: (order.get(n, len(FIELDS)), n))
    return [name for name in names if len({one.get(name, "absent") for one in values}) > 1]


def _batches_text(batches: list[BatchRef], totals: dict[tuple[str, str, str], int]) -> str:
    """e.g. "standin alpha/reach (all 2), beta/open 0003-2": a task whose every batch is in the group says so."""
    tasks: dict[tuple[str, str, str], list[str]] = {}
    for ref in batches:
        tasks.setdefault((ref.benchmark, ref.suite, ref.task), []).append(ref.label)
    parts = []
    for (benchmark, suite, task), labels in list(tasks.items())[:SHOWN_TASKS]:
        total = totals.get((benchmark, suite, task), len(labels))
        which = f"(all {total})" if len(labels) == total else " ".join(labels)
        parts.append(f"{benchmark} {suite}/{task} {which}")
    more = len(tasks) - SHOWN_TASKS
    return ", ".join(parts) + (f", ... and {more} more task(s)" if more > 0 else "")


def describe(values: dict[str, str] | None, names: list[str] | None = None) -> str:
    """An environment in one line: the fields `names` (default: all) as `field value`."""
    if values is None:
        return NOT_RECORDED + " (written before batches recorded their environment)"
    shown = names if names is not None else list(values)
    return ", ".join(f"{name.removeprefix('packages.')} {values.get(name, 'absent')}" for name in shown)


def environment_lines(batches: dict[BatchRef, BatchEnvironment | None]) -> list[str]:
    """What status and the report say of a run's environments: one line when every batch ran under one (or none
    recorded one); else a flag naming the fields that differ, then each environment's values of those fields and
    its batches."""
    if not batches:
        return []
    groups = group_batches(batches)
    if len(groups) == 1:
        only = groups[0]
        if only.values is None:
            return [f"environment: {NOT_RECORDED} (every batch was written before batches recorded it)"]
        return [f"environment: every batch ran under one: {describe(only.values)}"]
    recorded = [g.values for g in groups if g.values is not None]
    names = differing_fields(recorded)
    totals: dict[tuple[str, str, str], int] = {}
    for ref in batches:
        key = (ref.benchmark, ref.suite, ref.task)
        totals[key] = totals.get(key, 0) + 1
    differ = f"they differ in {', '.join(names)}" if names else "some batches did not record theirs"
    lines = [f"WARNING: batches ran under {len(groups)} environments ({differ}); results may not be comparable:"]
    for number, group in enumerate(groups, 1):
        lines.append(
            f"  [{number}] {describe(group.values, names or None)}: {len(group.batches)} batch(es): "
            f"{_batches_text(group.batches, totals)}"
        )
    return lines


def environment_markdown(lines: list[str]) -> str:
    """The report's Markdown section of `environment_lines` ("" without batches)."""
    return "\n## Environment\n\n```text\n" + "\n".join(lines) + "\n```\n" if lines else ""


def environment_html(lines: list[str]) -> str:
    """The report's HTML section of `environment_lines` ("" without batches)."""
    return f"<h3>Environment</h3>\n<pre>{escape(chr(10).join(lines))}</pre>\n" if lines else ""


def run_environments(benchmark_dir: Path, benchmark: str) -> dict[BatchRef, BatchEnvironment | None]:
    """The recorded environment of every batch file under a benchmark's results (`<bench>/batches/<suite>/<task>/
    <label>.json`), read without validating the files (the summary that is compared validated them)."""
    found: dict[BatchRef, BatchEnvironment | None] = {}
    for path in sorted((benchmark_dir / "batches").glob("*/*/*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8")).get(ENVIRONMENT_KEY)
        except (OSError, ValueError, AttributeError):
            continue
        found[BatchRef(benchmark, path.parent.parent.name, path.parent.name, path.stem)] = record
    return found


RunEnvironments = dict[BatchRef, BatchEnvironment | None]  # a run's batches and what each recorded


def comparison_warnings(name_a: str, a: RunEnvironments, name_b: str, b: RunEnvironments) -> list[str]:
    """Why two runs' numbers may differ for another reason than the policy: the fields whose values differ between
    the environments of A's and B's batches (each run's values, several where its batches ran under several), or
    that one of them did not record its environment. Empty when both ran under the same environment(s)."""
    groups_a, groups_b = group_batches(a), group_batches(b)
    unrecorded = [
        name for name, groups in ((name_a, groups_a), (name_b, groups_b)) if any(g.values is None for g in groups)
    ]
    values_a = [g.values for g in groups_a if g.values is not None]
    values_b = [g.values for g in groups_b if g.values is not None]
    lines = []
    names = [
        name
        for name in differing_fields(values_a + values_b)
        if {v.get(name, "absent") for v in values_a} != {v.get(name, "absent") for v in values_b}
    ]
    if values_a and values_b and names:
        lines.append(f"WARNING: the runs' environments differ in {', '.join(names)}:")
        for name in names:
            theirs_a = " / ".join(sorted({v.get(name, "absent") for v in values_a}))
            theirs_b = " / ".join(sorted({v.get(name, "absent") for v in values_b}))
            lines.append(f"  {name}: A {theirs_a}; B {theirs_b}")
    if unrecorded:
        lines.append(
            f"WARNING: environment {NOT_RECORDED} for some batches of {' and '.join(unrecorded)} (written before "
            "batches recorded it): whether the environments differ cannot be told"
        )
    return lines
