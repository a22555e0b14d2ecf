"""A campaign whose tasks score 0/50 and 50/50 is summarised, plotted and compared like any other."""

from __future__ import annotations

import pandas as pd
from runkit import fabricate_run

from evalwf.report.aggregate import summarize_benchmark


def test_summary_and_plot_of_zero_and_full_scores(tmp_path):
    all_or_nothing = {"reach": True, "push": False, "open": True}
    campaign = fabricate_run(
        tmp_path,
        lambda suite, task, index: all_or_nothing[task],
        standin={"episodes_per_task": 50, "batch_size": 25},
        reference={"standin": {"alpha": 50.0, "beta": 100.0}},
    )
    outputs = campaign.summary_paths("standin")
    tasks, _ = summarize_benchmark(campaign, "standin", outputs)
    rows = {row.task: row for row in tasks.itertuples()}
    assert (rows["push"].successes, rows["push"].episodes, rows["push"].ci95_low) == (0, 50, 0.0)
    assert (rows["reach"].successes, rows["reach"].ci95_high) == (50, 1.0)
    with open(outputs["plot"], "rb") as plot:
        assert plot.read(4) == b"\x89PNG"
    written = pd.read_csv(outputs["tasks"])
    assert written.loc[written.task == "push", "ci95_low"].iloc[0] == 0.0
    beta = pd.read_csv(outputs["reference"]).set_index("suite").loc["beta"]
    assert bool(beta.outside_ci) is False, "a reported 100 % is inside the interval of 50/50"
