"""Success rate by task with 95% Wilson intervals: one panel per suite (or task config + instruction type),
horizontal bars labelled with the task's (shortened) instruction, the suite rate in each panel title and the
reported score as a dashed marker when the config has one. Panel heights grow with the number of tasks, so
RoboTwin's 50 tasks per setting stay legible, and the width with the longest title, so no label is cut. A suite of
many tasks next to others (LIBERO's libero_90) gets a figure of its own, and one bar in the benchmark's."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from evalwf.common.atomic import atomic_write_bytes
from evalwf.report.stats import wilson_interval
from evalwf.report.tables import label_columns, shorten

LABEL_WIDTH = 48  # characters of an instruction shown next to its bar
ROW_INCHES = 0.26  # height per task bar
PANEL_EXTRA_INCHES = 0.9  # title, axis and tick labels of one panel


def bar_label(task: str, instruction: str, width: int = LABEL_WIDTH) -> str:
    """'3: put the bowl on the plate' (LIBERO), or the task name alone where the instruction is the name."""
    instruction = str(instruction or "").strip()
    if not instruction or instruction == str(task):
        return shorten(str(task), width)
    return shorten(f"{task}: {instruction}", width)


def panel_title(label: str, rows: pd.DataFrame, reported: float | None) -> str:
    successes, episodes = int(rows["successes"].sum()), int(rows["episodes"].sum())
    rate = f"{100 * successes / episodes:.1f}%" if episodes else "no episodes"
    low, high = wilson_interval(successes, episodes)
    ci = f" [{100 * low:.1f}, {100 * high:.1f}]" if episodes else ""
    title = f"{label}: {rate}{ci} ({successes}/{episodes})"
    if reported is not None:
        title += f", reported {reported:.1f}% (dashed line)"
    return title


def suite_overview(task_table: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """One row per suite, pooled over its tasks, shaped like the task table: the panel that stands for the suites
    plotted in their own figures."""
    rows = []
    for key, group in task_table.groupby(labels, sort=False):
        parts = key if isinstance(key, tuple) else (key,)
        successes, episodes = int(group["successes"].sum()), int(group["episodes"].sum())
        low, high = wilson_interval(successes, episodes)
        rows.append(
            {
                "suite": "suites",
                "task": " / ".join(str(p) for p in parts),
                "instruction": f"{len(group)} tasks",
                "successes": successes,
                "episodes": episodes,
                "success_rate": successes / episodes if episodes else math.nan,
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return pd.DataFrame(rows)


def task_success_figure(
    task_table: pd.DataFrame,
    title: str,
    reference: dict[str, float] | None = None,
    overview: pd.DataFrame | None = None,
) -> Figure:
    """The figure: one panel per suite (and first, with `overview`, a panel of suites plotted apart). Its height
    grows with the bars; its width with the longest title, so that no label is cut."""
    reference = reference or {}
    labels = label_columns(task_table, "task") if len(task_table) else []
    groups = list(task_table.groupby(labels, sort=False)) if len(task_table) else []
    if overview is not None and len(overview):
        groups.insert(0, (("suites plotted apart",), overview))
    sizes = [len(rows) for _, rows in groups] or [1]
    height = sum(ROW_INCHES * n + PANEL_EXTRA_INCHES for n in sizes) + 0.6
    longest = max([len(title) * 0.085 + 0.5, *(len(panel_title(_label(k), r, None)) * 0.07 + 3 for k, r in groups)])
    figure, axes = plt.subplots(
        len(sizes),
        1,
        figsize=(max(10.0, longest), height),
        squeeze=False,
        gridspec_kw={"height_ratios": [n + 3 for n in sizes]},
    )
    for axis, (key, rows) in zip(axes[:, 0], groups, strict=False):
        parts = key if isinstance(key, tuple) else (key,)
        suite_key = "-".join(str(p) for p in parts)  # RoboTwin reference keys are '<task_config>-<type>'
        reported = reference.get(suite_key)
        _panel(axis, rows, panel_title(_label(key), rows, reported), reported)
    if not groups:
        axes[0, 0].set_axis_off()
        axes[0, 0].text(0.5, 0.5, "no tasks", ha="center", va="center")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return figure


def _label(key: Any) -> str:
    return " / ".join(str(p) for p in (key if isinstance(key, tuple) else (key,)))


def _panel(axis: Any, rows: pd.DataFrame, title: str, reported: float | None) -> None:
    rates = rows["success_rate"].to_numpy(dtype=float) * 100
    lows, highs = rows["ci95_low"].to_numpy(dtype=float) * 100, rows["ci95_high"].to_numpy(dtype=float) * 100
    # clipped at 0: matplotlib refuses a negative error bar, and a rounding residue must not cost the plot
    errors = np.clip([rates - lows, highs - rates], 0, None)
    positions = np.arange(len(rows))
    axis.barh(positions, rates, color="#4c72b0", xerr=errors, capsize=2, ecolor="#333333", height=0.7)
    instructions = rows["instruction"] if "instruction" in rows else rows["task"]
    axis.set_yticks(positions, [bar_label(t, i) for t, i in zip(rows["task"], instructions, strict=True)])
    axis.tick_params(axis="y", labelsize=7)
    axis.invert_yaxis()  # first task on top, as in the tables
    axis.set_xlim(0, 112)
    axis.set_xticks(range(0, 101, 20))
    axis.tick_params(axis="x", labelsize=7)
    axis.grid(axis="x", color="#dddddd", linewidth=0.6)
    axis.set_axisbelow(True)
    axis.set_xlabel("success % (95% Wilson interval)", fontsize=8)
    for y, (successes, episodes) in enumerate(zip(rows["successes"], rows["episodes"], strict=True)):
        axis.text(111, y, f"{int(successes)}/{int(episodes)}", va="center", ha="right", fontsize=6.5)
    if reported is not None and not math.isnan(float(reported)):
        axis.axvline(float(reported), color="#c44e52", linestyle="--", linewidth=1.2)
    axis.set_title(title, fontsize=9, loc="left")


def _write(figure: Figure, path: str | Path) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def plot_task_success(
    task_table: pd.DataFrame,
    path: str | Path,
    title: str,
    reference: dict[str, float] | None = None,
    apart: dict[str, str] | None = None,
) -> None:
    """Write the PNG. `reference`: suite -> reported percent (config `reference.<benchmark>`), drawn as a marker.
    `apart`: suite -> path of its own PNG, for the suites of many tasks (Campaign.suites_plotted_apart); `path`
    then shows them as one bar each, above the panels of the other suites."""
    apart = apart or {}
    if not apart:
        _write(task_success_figure(task_table, title, reference), path)
        return
    labels = label_columns(task_table, "task")
    keys = task_table[labels].astype(str).agg("-".join, axis=1)
    for suite, own_path in apart.items():
        _write(task_success_figure(task_table[keys == suite], f"{title}: {suite}", reference), own_path)
    overview = suite_overview(task_table[keys.isin(list(apart))], labels)
    _write(task_success_figure(task_table[~keys.isin(list(apart))], title, reference, overview), path)
