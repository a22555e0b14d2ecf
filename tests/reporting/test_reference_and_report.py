"""Reference comparison, plots and the Snakemake HTML report on a finished stand-in run."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import REPO, run_snakemake, standin_config, write_config

from evalwf.report.aggregate import TaskTally
from evalwf.report.reference import compare_with_reference


def test_reference_comparison_in_percentage_points():
    tallies = [
        TaskTally("a", "t1", episodes=50, successes=45),
        TaskTally("a", "t2", episodes=50, successes=35),
        TaskTally("b", "t3", episodes=50, successes=50),
    ]
    table = compare_with_reference("libero", tallies, {"a": 80.0, "b": 70.0, "average": 90.0, "zzz": 1.0})
    rows = {row.suite: row for row in table.itertuples()}
    assert set(rows) == {"a", "b", "average"}, "suites not in the run are skipped"
    assert rows["a"].reproduced_pct == pytest.approx(80.0)
    assert rows["a"].difference_pp == pytest.approx(0.0)
    assert rows["a"].outside_ci is False
    assert rows["b"].reproduced_pct == pytest.approx(100.0)
    assert rows["b"].difference_pp == pytest.approx(30.0)
    assert rows["b"].outside_ci is True, "70% is outside the Wilson interval of 50/50"
    assert rows["average"].reproduced_pct == pytest.approx(90.0)


@pytest.mark.slow
def test_report_contains_tables_plots_and_config(tmp_path):
    reference = {"source": "made-up paper", "standin": {"alpha": 75.0, "beta": 10.0}}
    config = standin_config(tmp_path, reference=reference, standin={"batch_size": 5})  # one batch job per task
    configfile = write_config(tmp_path / "campaign.yaml", config)
    run_snakemake(tmp_path, "--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile))
    bench = tmp_path / "results" / "t" / "standin"
    comparison = pd.read_csv(bench / "reference_comparison.csv")
    assert list(comparison.suite) == ["alpha", "beta"]
    assert (bench / "success_by_task.png").read_bytes()[:4] == b"\x89PNG"
    report = tmp_path / "report.html"
    run_snakemake(tmp_path, "--configfile", str(configfile), "--report", str(report))
    html = report.read_text(errors="replace")
    for name in (
        "task_summary.csv",
        "suite_summary.csv",
        "summary.md",
        "summary.tex",
        "summary.html",
        "success_by_task.png",
        "reference_comparison.csv",
        "campaign.yaml",
    ):
        assert name in html, f"{name} missing from the report"
    # the landing page (the workflow description) inlines the tables and the plot of summary.html
    landing = html[html.index("Policy evaluation campaign") :]
    landing = landing[: landing.index("</div>")]
    assert "standin: " in landing and "batches validated (final)" in landing
    for text in ("average of suites", "reach the coloured block", "Reported vs reproduced (made-up paper)"):
        assert text in landing, f"{text!r} not on the landing page"
    assert "data:image/png;base64," in landing
    # every output has its caption
    for caption in ("A LaTeX", "Success rate by task with 95% Wilson", "Per task: successes / episodes"):
        assert caption in html
