"""Comparing two finished runs: Newcombe's interval against the published example, tables, CSV and Markdown."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import REPO, missing_facts
from runkit import fabricate_run

from evalwf.report import compare
from evalwf.report.aggregate import summarize_benchmark
from evalwf.rules.jobs import record_campaign


def test_newcombe_interval_matches_the_published_example():
    # Newcombe (1998), Statistics in Medicine 17:873-890, Table II example (b): 56/70 vs 48/80,
    # difference 0.2000, 95 % CI by method 10 (score, no continuity correction) 0.0524 to 0.3339.
    difference, low, high = compare.newcombe_interval(56, 70, 48, 80)
    assert difference == pytest.approx(0.2)
    assert round(low, 4) == 0.0524
    assert round(high, 4) == 0.3339
    # swapping the groups mirrors the interval
    mirrored = compare.newcombe_interval(48, 80, 56, 70)
    assert mirrored == pytest.approx((-0.2, -0.3339, -0.0524), abs=5e-5)


def test_newcombe_interval_at_the_extremes():
    difference, low, high = compare.newcombe_interval(50, 50, 0, 50)
    assert difference == 1.0 and high == 1.0 and 0.85 < low < 0.95
    difference, low, high = compare.newcombe_interval(0, 50, 0, 50)
    assert difference == 0.0 and low < 0 < high, "0/50 vs 0/50 is no significant difference"


SECTION = {"episodes_per_task": 50, "batch_size": 25}
RUN_A = {"reach": lambda i: i < 25, "push": lambda i: False, "open": lambda i: i < 40}  # 25/50, 0/50, 40/50
RUN_B = {"reach": lambda i: True, "push": lambda i: i < 3, "open": lambda i: i < 38}  # 50/50, 3/50, 38/50


def finished_run(tmp_path, name, outcomes):
    campaign = fabricate_run(tmp_path / name, lambda suite, task, i: outcomes[task](i), standin=SECTION, run=name)
    record_campaign(campaign.config, str(campaign.root / "campaign.yaml"))
    summarize_benchmark(campaign, "standin", campaign.summary_paths("standin"), echo=False)
    return campaign.root


def test_compare_two_runs_per_suite_and_task(tmp_path, capsys):
    run_a, run_b = finished_run(tmp_path, "ckpt-a", RUN_A), finished_run(tmp_path, "ckpt-b", RUN_B)
    assert compare.main([str(run_a), str(run_b), "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    tasks = table[table.level == "task"].set_index("task")
    expected = {
        "reach": compare.newcombe_interval(50, 50, 25, 50),
        "push": compare.newcombe_interval(3, 50, 0, 50),
        "open": compare.newcombe_interval(38, 50, 40, 50),
    }
    for task, (difference, low, high) in expected.items():
        row = tasks.loc[task]
        assert (row.difference_pp, row.ci95_low_pp, row.ci95_high_pp) == (
            round(100 * difference, 1),
            round(100 * low, 1),
            round(100 * high, 1),
        )
    assert tasks.loc["reach", "significant"] == "yes", "25/50 -> 50/50"
    assert tasks.loc["push", "significant"] == "no", "0/50 -> 3/50: the interval still holds 0"
    assert tasks.loc["open", "significant"] == "no"
    assert tasks.loc["reach", "instruction"] == "reach the coloured block"
    suites = table[table.level == "suite"].set_index("suite")
    difference, low, high = compare.newcombe_interval(53, 100, 25, 100)  # alpha pooled: 25+0 -> 50+3
    assert suites.loc["alpha", "difference_pp"] == round(100 * difference, 1) == 28.0
    assert suites.loc["alpha", "significant"] == ("yes" if low > 0 else "no") == "yes"
    average = table[table.level == "average"].iloc[0]
    # alpha has 100 episodes, beta 50: the average of suites is a mean of rates, so no interval is claimed
    assert average.difference_pp == round(100 * ((0.53 + 0.76) / 2 - (0.25 + 0.80) / 2), 1)
    assert pd.isna(average.ci95_low_pp) and pd.isna(average.significant)

    reach_line = next(line for line in printed.splitlines() if " reach " in line)
    assert "25/50" in reach_line and "50/50" in reach_line and "+50.0" in reach_line and reach_line.endswith("yes")
    assert "A: ckpt-a (standin-policy@" in printed
    assert "2 significant difference(s): alpha, alpha/reach" in printed
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    low_pp, high_pp = 100 * expected["reach"][1], 100 * expected["reach"][2]
    assert "| standin | alpha | reach | reach the coloured block | 50.0 (25/50) | 100.0 (50/50) | +50.0 | " in markdown
    assert f"[{low_pp:+.1f}, {high_pp:+.1f}] | yes |" in markdown


def test_compare_refuses_an_unfinished_run(tmp_path):
    run_a = finished_run(tmp_path, "ckpt-a", RUN_A)
    partial = fabricate_run(tmp_path / "p", lambda s, t, i: True, standin=SECTION, run="p", skip={"push/0025-25"})
    completed = subprocess.run(
        [sys.executable, "-m", "evalwf.report.compare", str(run_a), str(partial.root)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert completed.returncode != 0 and "no summaries" in completed.stderr


def test_a_run_of_several_policies_names_its_policies_and_one_of_them_compares(tmp_path, capsys):
    """A sweep's results are per policy (results/<run>/<policy>/<benchmark>): comparing the run said "no summaries
    yet; has the run finished?" although every summary was there."""
    run_b = finished_run(tmp_path, "ckpt-b", RUN_B)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for policy, outcomes in (("step-10k", RUN_A), ("step-20k", RUN_B)):
        (sweep / policy).mkdir()
        (finished_run(tmp_path / policy, "run", outcomes) / "standin").rename(sweep / policy / "standin")
    identities = {"step-10k": "serve@10k", "step-20k": "serve@20k"}
    snapshot = {"policy_identity": "serve@10k", "policy_identities": identities}
    (sweep / "campaign.yaml").write_text(yaml.safe_dump(snapshot))
    with pytest.raises(SystemExit) as refused:
        compare.main([str(sweep), str(run_b)])
    message = str(refused.value)
    command = f"evalwf compare {sweep / 'step-10k'}"
    assert not missing_facts(message, "several policies", "step-10k", "step-20k", command, str(sweep / "comparison"))
    assert "has the run finished" not in message
    assert compare.main([str(sweep / "step-10k"), str(run_b)]) == 0
    printed = capsys.readouterr().out
    assert "A: sweep/step-10k (serve@10k)" in printed
    reach_line = next(line for line in printed.splitlines() if " reach " in line)
    assert "25/50" in reach_line and "50/50" in reach_line, reach_line
