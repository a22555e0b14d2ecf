"""The Snakemake report of a finished stand-in run, and of a two-policy sweep, opened in headless Chromium at
1400x900: the landing page starts at the top (its title visible at scroll 0), shows the headline table and the
plot first, and for a sweep the comparison across policies above the fold; every policy's summary is named."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import REPO, FinishedRun, run_snakemake, standin_config, standin_policy, write_config
from scriptkit import load_script

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1400, 900


CHROMIUM = load_script("headless_chromium")


def _need_chromium() -> None:
    """Under CI the browser must be there (make test-tools installs it); elsewhere its absence skips."""
    if CHROMIUM.find_chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no chromium: make test-tools installs Debian's chromium package")
        pytest.skip("no chromium on PATH (make test-tools installs Debian's chromium package)")


def _build(workdir: Path, config: dict) -> tuple[Path, str]:
    configfile = write_config(workdir / "campaign.yaml", config)
    run = run_snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile))
    report = workdir / "report.html"
    run_snakemake(workdir, "--configfile", str(configfile), "--report", str(report))
    return report, run.stdout + run.stderr


@pytest.fixture(scope="module")
def single_report(finished_standin_run: FinishedRun, tmp_path_factory) -> Path:
    """The report of the session's finished run (conftest.finished_standin_run), written outside its directory."""
    report = tmp_path_factory.mktemp("single") / "report.html"
    run_snakemake(
        finished_standin_run.workdir, "--configfile", str(finished_standin_run.configfile), "--report", str(report)
    )
    return report


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory) -> tuple[Path, str]:
    workdir = tmp_path_factory.mktemp("sweep")
    # a task in each of two suites: the comparison has per-suite rows, and where it sits does not depend on how
    # many tasks there are (4 batch jobs, not 6)
    section = {"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 2}
    config = standin_config(workdir, run="my-sweep", standin=section)
    del config["policy"]
    config.update(
        policies=[standin_policy("step-1000", "--noise 1.4"), standin_policy("step-2000", "--noise 0.6")],
        baseline="step-1000",
    )
    # an earlier run of the sweep had a policy since renamed: its results stay, and the run's end names them
    (Path(config["results_dir"]) / "my-sweep" / "step-0500" / "standin" / "batches").mkdir(parents=True)
    return _build(workdir, config)


def _landing(html: str) -> str:
    start = html.index("Policy evaluation campaign")
    return html[start : html.index("evalwf-links", start)]


def test_report_contains_tables_plots_and_config(single_report, finished_standin_run):
    report = single_report
    bench = finished_standin_run.benchmark_dir
    assert (bench / "success_by_task.png").read_bytes()[:4] == b"\x89PNG"
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
        "landing.html",
    ):
        assert name in html, f"{name} missing from the report"
    landing = _landing(html)
    # the answer first: the headline table (success, interval, done/total, status), then the plot, then links
    headline, plot = landing.index("Episodes done / planned"), landing.index("data:image/png;base64,")
    assert headline < plot < landing.index("<h2>Details</h2>")
    for text in ("average of suites", "15/15", "complete", "Reported vs reproduced (made-up paper)"):
        assert text in landing, f"{text!r} not on the landing page"
    assert ">nan<" not in landing
    # every output has its caption
    for caption in ("A LaTeX", "Success rate by task with 95% Wilson", "Per task: successes / episodes"):
        assert caption in html


def test_landing_page_starts_at_its_title_in_a_browser(single_report, tmp_path):
    _need_chromium()
    report = single_report
    view = CHROMIUM.page_view(
        report.as_uri(), ["#evalwf-title", ".evalwf-landing table", ".evalwf-plot"], ready="#evalwf-title"
    )
    (tmp_path / "single.png").write_bytes(view.png)
    title, table, plot = (view.boxes[s] for s in ("#evalwf-title", ".evalwf-landing table", ".evalwf-plot"))
    assert view.scroll_top == 0
    assert 0 <= title["top"] < title["bottom"] <= HEIGHT, f"the title is not on screen at scroll 0: {title}"
    assert table["bottom"] <= HEIGHT, f"the headline table is below the fold: {table}"
    assert plot["top"] > table["bottom"] and plot["right"] - plot["left"] >= 800, f"the plot is small: {plot}"


def test_sweep_report_opens_on_the_comparison(sweep_report, tmp_path):
    report, output = sweep_report
    # the end-of-run blocks and every summary name their policy
    for policy in ("step-1000", "step-2000"):
        assert f"=== my-sweep / {policy} / standin ===" in output
    stale = report.parent / "results" / "my-sweep" / "step-0500"
    assert output.count(f"not part of this campaign: {stale} (") == 1 and stale.is_dir()
    html = report.read_text(errors="replace")
    landing = _landing(html)
    headings = re.findall(r"<h3>([^<]*)</h3>", landing)
    assert headings == ["my-sweep / step-1000 / standin", "my-sweep / step-2000 / standin"]
    assert landing.index("Policies compared on standin") < landing.index("<h3>")
    _need_chromium()
    view = CHROMIUM.page_view(report.as_uri(), ["#evalwf-title", "#evalwf-comparison-standin"], ready="#evalwf-title")
    (tmp_path / "sweep.png").write_bytes(view.png)
    title, heading = view.boxes["#evalwf-title"], view.boxes["#evalwf-comparison-standin"]
    assert title["top"] >= 0 and heading["bottom"] <= HEIGHT, f"title {title}, comparison heading {heading}"
