"""The gather step's human outputs on fabricated finished runs: printed tables, summary.md, summary.tex, the plot."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
from runkit import fabricate_run

from evalwf.benchmark.adapter import get_adapter
from evalwf.report.aggregate import IncompleteRunError, summarize_benchmark, wilson_interval
from evalwf.report.plots import ROW_INCHES, bar_label, panel_title, plot_task_success
from evalwf.report.tables import format_latex, latex_escape

# reach 50/50, push 0/50, open 20/50 (the even episodes below 40)
OUTCOMES = {"reach": lambda i: True, "push": lambda i: False, "open": lambda i: i < 40 and i % 2 == 0}


def finished_run(tmp_path, **overrides):
    campaign = fabricate_run(
        tmp_path,
        lambda suite, task, index: OUTCOMES[task](index),
        standin={"episodes_per_task": 50, "batch_size": 25},
        **overrides,
    )
    return campaign, campaign.summary_paths("standin")


def test_printed_tables_have_average_row_and_instructions(tmp_path, capsys):
    campaign, outputs = finished_run(tmp_path)
    summarize_benchmark(campaign, "standin", outputs)
    printed = capsys.readouterr().err
    assert "standin: 70/150 successes over 3 tasks, 6/6 batches validated (final)" in printed
    lines = printed.splitlines()
    alpha = next(line for line in lines if line.startswith("alpha ") and "50/100" in line)
    assert alpha.split()[1:5] == ["2", "50/100", "50.0", "40.4-59.6"]
    # average of suites = mean of the suite rates (50 % and 40 %), interval from the pooled 70/150 (equal? no:
    # alpha has 100 episodes, beta 50, so no interval is claimed)
    average = next(line for line in lines if line.startswith("average of suites"))
    assert average.split()[3:7] == ["3", "70/150", "45.0", "-"]
    reach = next(line for line in lines if line.startswith("alpha  reach"))
    assert "reach the coloured block" in reach and "50/50" in reach and "92.9-100.0" in reach
    push = next(line for line in lines if line.startswith("alpha  push"))
    assert "0/50" in push and "0.0-7.1" in push
    opened = next(line for line in lines if line.startswith("beta   open"))
    low, high = wilson_interval(20, 50)
    assert f"{100 * low:.1f}-{100 * high:.1f}" in opened and "40.0" in opened


def test_task_csv_has_instruction_and_percentages(tmp_path):
    campaign, outputs = finished_run(tmp_path)
    summarize_benchmark(campaign, "standin", outputs, echo=False)
    tasks = pd.read_csv(outputs["tasks"]).set_index("task")
    assert tasks.loc["open", "instruction"] == "open the coloured block"
    assert tasks.loc["open", "success_pct"] == 40.0
    assert tasks.loc["push", ["success_pct", "ci95_low_pct", "ci95_high_pct"]].tolist() == [0.0, 0.0, 7.1]
    assert tasks.loc["reach", ["success_pct", "ci95_low_pct", "ci95_high_pct"]].tolist() == [100.0, 92.9, 100.0]
    suites = pd.read_csv(outputs["suites"], keep_default_na=False).set_index("suite")
    assert float(suites.loc["average", "success_pct"]) == 45.0
    assert float(suites.loc["beta", "ci95_high_pct"]) == round(100 * wilson_interval(20, 50)[1], 1)


def test_libero_task_instruction_comes_from_the_manifest():
    adapter = get_adapter("libero")
    manifest = {"extra": {"language": "pick up the black bowl and place it on the plate"}}
    assert adapter.task_instruction("3", manifest) == "pick up the black bowl and place it on the plate"
    assert adapter.task_instruction("3", None) == "task 3"
    assert get_adapter("robotwin").task_instruction("beat_block_hammer", None) == "beat_block_hammer"


def test_partial_run_is_refused_and_points_to_a_command_that_exists(tmp_path):
    from evalwf.cli.main import DELEGATED

    section = {"episodes_per_task": 4, "batch_size": 2}
    campaign = fabricate_run(tmp_path, lambda suite, task, index: True, standin=section, skip={"push/0002-2"})
    outputs = campaign.summary_paths("standin")
    with pytest.raises(IncompleteRunError, match="1 batch result") as error:
        summarize_benchmark(campaign, "standin", outputs)
    assert f"`evalwf status {campaign.root}`" in str(error.value) and "status" in DELEGATED
    assert not any(Path(path).exists() for path in outputs.values()), "nothing written for an unfinished run"


def test_markdown_and_latex_with_reference_comparison(tmp_path):
    reference = {"source": "Paper & Co. 2025", "standin": {"alpha": 50.0, "beta": 60.0, "average": 45.0}}
    campaign, outputs = finished_run(tmp_path, reference=reference)
    summarize_benchmark(campaign, "standin", outputs, echo=False)
    markdown = Path(outputs["markdown"]).read_text()
    assert "| alpha | 2 | 50/100 | 50.0 | 40.4-59.6 | complete |" in markdown
    assert "| average of suites | 3 | 70/150 | 45.0 | - | complete |" in markdown
    # beta reproduced 40.0 % (20/50, CI 27.6-53.8): 60 % reported is outside, -20 pp
    assert "| beta | 60.0 | 40.0 | -20.0 | 27.6-53.8 | no |" in markdown
    assert "| alpha | 50.0 | 50.0 | +0.0 | 40.4-59.6 | yes |" in markdown
    assert "| alpha | push | push the coloured block | 0/50 | 0.0 | 0.0-7.1 |" in markdown
    assert "Paper & Co. 2025" in markdown

    latex = Path(outputs["latex"]).read_text()
    assert latex.count(r"\toprule") == latex.count(r"\bottomrule") == 1
    assert r"\begin{tabular}{lrrrrrr}" in latex
    assert r"alpha & 50.0 & [40.4, 59.6] & 100 & 50.0 & +0.0 & yes \\" in latex
    assert r"beta & 40.0 & [27.6, 53.8] & 50 & 60.0 & -20.0 & no \\" in latex
    body = latex[latex.index(r"\midrule") :]
    assert re.search(r"\\midrule\nAverage & 45\.0 & -- & 150 & 45\.0 & \+0\.0 & -- \\\\", body)
    assert r"Paper \& Co. 2025" in latex and "Paper & Co" not in latex


def test_latex_equal_suites_average_has_pooled_interval_and_escapes(tmp_path):
    campaign = fabricate_run(
        tmp_path,
        lambda suite, task, index: task == "reach",
        standin={"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 50, "batch_size": 50},
        run="run_1",
    )
    outputs = campaign.summary_paths("standin")
    _, suites = summarize_benchmark(campaign, "standin", outputs, echo=False)
    latex = format_latex("run_1", "standin", suites)
    low, high = wilson_interval(50, 100)
    assert f"Average & 50.0 & [{100 * low:.1f}, {100 * high:.1f}] & 100" in latex
    assert r"\texttt{run\_1}" in latex and r"\label{tab:run-1-standin}" in latex
    assert "Reported" not in latex, "no reference columns without reference scores"
    assert latex_escape("50% of a_b & {c}") == r"50\% of a\_b \& \{c\}"


def test_plot_horizontal_bars_readable_with_many_tasks(tmp_path):
    campaign, outputs = finished_run(tmp_path, reference={"standin": {"alpha": 50.0}})
    tasks, _ = summarize_benchmark(campaign, "standin", outputs, echo=False)
    small = matplotlib.image.imread(outputs["plot"])
    # 50 tasks in one panel (RoboTwin's per-setting count): the figure grows with the task count
    many = pd.concat([tasks.iloc[[2]]] * 50, ignore_index=True)
    many["task"] = [f"task_{i:02d}" for i in range(50)]
    many["instruction"] = [f"put the object number {i} into the drawer on the left of the table" for i in range(50)]
    plot_task_success(many, tmp_path / "many.png", "fifty tasks")
    big = matplotlib.image.imread(tmp_path / "many.png")
    assert big.shape[0] >= 50 * ROW_INCHES * 100, "at least ROW_INCHES per bar at 100 dpi"
    assert big.shape[0] > 2 * small.shape[0]
    assert big.shape[1] == small.shape[1] == 1000
    label = bar_label("task_07", many["instruction"][7])
    assert label.startswith("task_07: put the object number 7") and label.endswith("…") and len(label) <= 48
    assert bar_label("beat_block_hammer", "beat_block_hammer") == "beat_block_hammer"
    alpha = tasks[tasks.suite == "alpha"]
    assert panel_title("alpha", alpha, 50.0) == "alpha: 50.0% [40.4, 59.6] (50/100), reported 50.0% (dashed line)"
    assert panel_title("beta", tasks[tasks.suite == "beta"], None) == "beta: 40.0% [27.6, 53.8] (20/50)"
