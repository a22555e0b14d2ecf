"""The gather step's human outputs on fabricated finished runs: printed tables, summary.md, summary.tex, the plot."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot
import pandas as pd
import pytest
from conftest import REPO, missing_facts
from runkit import fabricate_run

from evalwf.benchmark.adapter import get_adapter
from evalwf.common.commands import evalwf_command
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
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
    assert f"`{evalwf_command('status', str(campaign.root))}`" in str(error.value) and "status" in DELEGATED
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
    title = panel_title("alpha", alpha, 50.0)
    assert not missing_facts(title, "alpha", "50.0%", "[40.4, 59.6]", "(50/100)", "reported 50.0%"), title
    title = panel_title("beta", tasks[tasks.suite == "beta"], None)
    assert not missing_facts(title, "beta", "40.0%", "[27.6, 53.8]", "(20/50)") and "reported" not in title, title


def _task_rows(count: int, suite: str = "alpha") -> pd.DataFrame:
    """A task table of `count` tasks with long instructions, as aggregate.task_table writes it."""
    rows = []
    for i in range(count):
        successes, episodes = i % 6, 5 + i % 2
        low, high = wilson_interval(successes % (episodes + 1), episodes)
        rows.append(
            {
                "benchmark": "standin",
                "suite": suite,
                "task": f"task_{i:02d}",
                "instruction": f"pick up the object number {i} and put it into the basket on the left of the table",
                "successes": successes % (episodes + 1),
                "episodes": episodes,
                "success_rate": (successes % (episodes + 1)) / episodes,
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return pd.DataFrame(rows)


def _drawn_texts(figure) -> list:
    """The texts matplotlib draws: titles, axis labels, legends, annotations, and the tick labels in view."""
    texts = [*figure.texts, *(t for t in [figure._suptitle] if t is not None)]
    for axis in figure.axes:
        texts += [axis.title, axis._left_title, axis._right_title, axis.xaxis.label, axis.yaxis.label, *axis.texts]
        if axis.get_legend():
            texts += axis.get_legend().get_texts()
        for ticks, (low, high) in ((axis.xaxis, sorted(axis.get_xlim())), (axis.yaxis, sorted(axis.get_ylim()))):
            texts += [t.label1 for t in ticks.get_major_ticks() if low <= t.get_loc() <= high]
    return [t for t in texts if t.get_visible() and t.get_text()]


def _cut_texts(figure) -> list[str]:
    """Every drawn text of the figure that does not lie wholly inside it."""
    renderer = figure.canvas.get_renderer()
    box = figure.bbox
    cut = []
    for text in _drawn_texts(figure):
        extent = text.get_window_extent(renderer)
        if extent.x0 < box.x0 - 0.5 or extent.x1 > box.x1 + 0.5 or extent.y0 < box.y0 - 0.5 or extent.y1 > box.y1 + 0.5:
            cut.append(text.get_text())
    return cut


@pytest.mark.parametrize("count", [2, 90])
def test_plot_grows_with_its_tasks_and_cuts_no_label(count):
    from evalwf.report.plots import task_success_figure

    run = "pi0-libero-finetune-2026-12-01-lr3e-5-bs256-with-a-long-name"
    title = f"{run} / step-30000-ema / standin: success rate by task (95% Wilson)"
    figure = task_success_figure(_task_rows(count), title)
    figure.canvas.draw()
    assert _cut_texts(figure) == []
    height_px = figure.get_size_inches()[1] * 100
    assert height_px >= count * ROW_INCHES * 100, "at least ROW_INCHES per bar at 100 dpi"
    labels = [t for t in figure.axes[0].get_yticklabels() if t.get_text()]
    assert len(labels) == count
    boxes = sorted((t.get_window_extent().y0, t.get_window_extent().y1) for t in labels)
    assert all(upper[0] >= lower[1] - 0.5 for lower, upper in itertools.pairwise(boxes)), "task labels overlap"
    matplotlib.pyplot.close(figure)


def test_a_suite_of_many_tasks_gets_its_own_plot(tmp_path):
    """LIBERO-like: four suites of 10 and one of 90 tasks. The 90 get a figure of their own; the benchmark's plot
    keeps the others' bars and shows the big suite as one bar."""
    tasks = pd.concat([_task_rows(10, f"small_{i}") for i in range(4)] + [_task_rows(90, "big_90")], ignore_index=True)
    main, own = tmp_path / "main.png", tmp_path / "big.png"
    plot_task_success(tasks, main, "libero-like", apart={"big_90": str(own)})
    big, shared = matplotlib.image.imread(own), matplotlib.image.imread(main)
    assert big.shape[0] >= 90 * ROW_INCHES * 100
    assert shared.shape[0] < (40 + 10) * ROW_INCHES * 100 + 6 * 100, "the 90 bars are not in the shared plot"
    config = load_config(REPO / "config" / "libero.yaml", REPO / "config" / "policies" / "standin.yaml")
    config["benchmarks"]["libero"]["suites"] = {"libero_spatial": "all", "libero_90": "all"}
    config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
    campaign = Campaign(validate_config(config)).single()
    assert campaign.suites_plotted_apart("libero") == {"libero_90": "plot_libero_90"}
    assert campaign.summary_paths("libero")["plot_libero_90"].endswith("success_by_task.libero_90.png")
    config["benchmarks"]["libero"]["suites"] = {"libero_90": "all"}
    assert Campaign(validate_config(config)).single().suites_plotted_apart("libero") == {}, (
        "a suite alone keeps the plot"
    )


def test_success_by_policy_plot_cuts_no_label(tmp_path):
    """Its title names the run, the benchmark and the baseline: the figure is as wide as that needs."""
    from conftest import standin_config, standin_policy

    from evalwf.report.policy_comparison import success_by_policy_figure

    config = standin_config(tmp_path, run="a-sweep-of-a-long-training-run-name")
    del config["policy"]
    names = ["checkpoint-step-001000", "checkpoint-step-002000"]
    config.update(policies=[standin_policy(name) for name in names], baseline=names[0])
    campaign = Campaign(validate_config(config))
    table = pd.DataFrame(
        [
            {"level": "suite", "suite": suite, "policy": name, "success_pct": 50.0}
            | {"wilson_low_pct": 30.0, "wilson_high_pct": 70.0}
            for suite in ("alpha", "beta")
            for name in names
        ]
    )
    figure = success_by_policy_figure(campaign, "standin", table)
    figure.canvas.draw()
    assert _cut_texts(figure) == []
    matplotlib.pyplot.close(figure)
