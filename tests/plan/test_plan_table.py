"""The plan table: counts of the shipped configs, done vs to run from real result files, the JSON form, and the
same plan at the end of `snakemake -n`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, job_counts, run_snakemake, standin_config, write_config
from runkit import fabricate_run

from benchmarks.libero.suites import SUITES
from benchmarks.robotwin.tasks import STEP_LIMITS
from evalwf.plan.campaign import Campaign, PolicyCampaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.table import build_plan, to_json

EVALWF = Path(sys.executable).with_name("evalwf")


def shipped(tmp_path: Path, *names: str, **overrides) -> PolicyCampaign:
    """A shipped benchmark file with the stand-in policy file, its results (and manifest cache) under tmp_path, so
    nothing on disk counts."""
    config = load_config(*(REPO / "config" / name for name in (*names, "policies/standin.yaml"))).document()
    config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"), **overrides)
    return Campaign(validate_config(config)).single()


def test_libero_config_plans_400_batches_of_2000_episodes(tmp_path):
    plan = build_plan(shipped(tmp_path, "libero.yaml"))
    total = plan.total
    assert (total.tasks, total.episodes, total.batches) == (40, 2000, 400)
    assert (total.done, total.to_run, total.invalid, total.manifests_to_build) == (0, 400, 0, 40)
    assert [row.suite for row in plan.rows] == ["libero_spatial", "libero_object", "libero_goal", "libero_10"]
    for row in plan.rows:
        assert (row.benchmark, row.tasks, row.episodes, row.batches, row.to_run) == ("libero", 10, 500, 100, 100)
        # openpi's per-suite limit plus the 10 settle steps, which the simulator also runs
        assert row.steps_per_episode == (SUITES[row.suite].max_steps + 10,) * 2
    assert plan.policy_identity.startswith("standin-policy@")
    assert plan.other_policy_identities == {}


def test_robotwin_config_plans_1000_batches_of_5000_episodes(tmp_path):
    plan = build_plan(shipped(tmp_path, "robotwin.yaml"))
    total = plan.total
    assert (total.tasks, total.episodes, total.batches, total.to_run, total.manifests_to_build) == (
        50,
        5000,
        1000,
        1000,
        50,
    )
    [row] = plan.rows
    assert row.suite == "demo_clean-unseen"
    assert row.labels == {"task_config": "demo_clean", "instruction_type": "unseen"}
    assert row.steps_per_episode == (min(STEP_LIMITS.values()), max(STEP_LIMITS.values())) == (400, 1700)
    assert plan.policy_identity.startswith("standin-policy-14@")


def test_seen_and_unseen_share_manifests_counted_once_in_the_total(tmp_path):
    config = load_config(REPO / "config" / "robotwin.yaml", REPO / "config" / "policies" / "standin.yaml").document()
    config["benchmarks"]["robotwin"]["instruction_types"] = ["seen", "unseen"]
    config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
    plan = build_plan(Campaign(validate_config(config)).single())
    assert [(row.suite, row.batches, row.manifests_to_build) for row in plan.rows] == [
        ("demo_clean-seen", 1000, 50),
        ("demo_clean-unseen", 1000, 50),
    ]
    assert (plan.total.batches, plan.total.episodes, plan.total.manifests_to_build) == (2000, 10000, 50)
    assert any("seen/unseen" in note for note in plan.notes)


def _partial_run(tmp_path: Path) -> tuple[Campaign, dict[str, str]]:
    """Stand-in campaign 3 tasks x batches 0000-2, 0002-2, 0004-1: two batches never ran, one result file is
    truncated, one was written by another policy. Returns the campaign and the two bad paths."""
    campaign = fabricate_run(tmp_path, lambda suite, task, i: i % 2 == 0, skip={"reach/0000-2", "open/0004-1"})
    by_label = {f"{b.ref.task}/{b.episodes.label}": b.path for b in campaign.batches()}
    corrupt, foreign = by_label["push/0002-2"], by_label["reach/0002-2"]
    Path(corrupt).write_text(Path(corrupt).read_text()[:100])
    data = json.loads(Path(foreign).read_text())
    data["policy_identity"] = "older-policy@0123456789ab"
    Path(foreign).write_text(json.dumps(data))
    return campaign, {"corrupt": corrupt, "foreign": foreign}


def test_partly_finished_run_counts_done_and_to_run_from_the_files(tmp_path):
    campaign, bad = _partial_run(tmp_path)
    plan = build_plan(campaign)
    rows = {row.suite: row for row in plan.rows}
    # alpha: reach 0000 missing, 0002 foreign, 0004 done; push 0000 done, 0002 corrupt, 0004 done
    assert (rows["alpha"].batches, rows["alpha"].done, rows["alpha"].to_run, rows["alpha"].invalid) == (6, 3, 3, 2)
    # beta: open 0000 and 0002 done, 0004 missing
    assert (rows["beta"].batches, rows["beta"].done, rows["beta"].to_run, rows["beta"].invalid) == (3, 2, 1, 0)
    assert (plan.total.done, plan.total.to_run, plan.total.invalid, plan.total.manifests_to_build) == (5, 4, 2, 0)
    reasons = {item.batch.path: item.reason for item in plan.invalid}
    assert set(reasons) == {bad["corrupt"], bad["foreign"]}
    assert "not readable JSON" in reasons[bad["corrupt"]] and bad["corrupt"] in reasons[bad["corrupt"]]
    assert "policy_identity 'older-policy@0123456789ab'" in reasons[bad["foreign"]]
    assert plan.other_policy_identities == {"older-policy@0123456789ab": 1}
    # every task has finished batches: all priced from measured durations (fabricate_run: 5.0 s per batch)
    assert {row.priced_by for row in plan.rows} == {"measured"}


def test_json_form_of_a_partial_run_from_the_console_script(tmp_path):
    campaign, bad = _partial_run(tmp_path)
    config_file = write_config(tmp_path / "partial.yaml", campaign.config.document())
    completed = subprocess.run(
        [str(EVALWF), "plan", "--configfile", str(config_file), "--json", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    data = json.loads(completed.stdout)
    assert data["run"] == "t" and data["policy_identity"] == campaign.policy.identity
    assert {k: data["total"][k] for k in ("tasks", "episodes", "batches", "done", "to_run", "invalid")} == {
        "tasks": 3,
        "episodes": 15,
        "batches": 9,
        "done": 5,
        "to_run": 4,
        "invalid": 2,
    }
    assert [(r["suite"], r["done"], r["to_run"]) for r in data["rows"]] == [("alpha", 3, 3), ("beta", 2, 1)]
    assert sorted(item["path"] for item in data["invalid"]) == sorted(bad.values())
    assert data["other_policy_identities"] == {"older-policy@0123456789ab": 1}
    cost = data["cost"]
    assert cost["workers"] == 2 and cost["assumptions"]
    # measured: reach 5 s/episode (0004-1), push 10 s / 3 episodes, open 10 s / 4 episodes; to run: reach 0000-2
    # and 0002-2, push 0002-2, open 0004-1
    expected_s = 2 * 2 * 5.0 + 2 * (10 / 3) + 1 * (10 / 4)
    assert abs(cost["gpu_hours_to_run"] * 3600 - expected_s) < 1e-9
    text = subprocess.run(
        [str(EVALWF), "plan", "--configfile", str(config_file)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert bad["corrupt"] in text and "2 result file(s) exist but do not count" in text


def test_dry_run_prints_the_plan_last(tmp_path):
    """After Snakemake's job blocks and its closing line, so that the table is what stays on the screen."""
    campaign, _ = _partial_run(tmp_path)
    config_file = write_config(tmp_path / "partial.yaml", campaign.config.document())
    out = run_snakemake(tmp_path, "-n", "--configfile", str(config_file)).stdout
    plan_at, closing_at = out.index("Plan of run t"), out.index("This was a dry-run")
    assert closing_at < plan_at and out.rstrip().endswith("--seconds-per-step S)")
    total_line = next(line for line in out[plan_at:].splitlines() if line.startswith("total"))
    # tasks episodes batches episodes/batch done to-run invalid manifests-to-build
    assert total_line.split()[1:9] == ["3", "15", "9", "1-2", "5", "4", "2", "0"]
    # Snakemake only reruns the missing batches: the invalid ones exist, which is why the plan names them
    assert job_counts(out)["evaluate_batch"] == 2


def test_plan_is_not_printed_outside_a_dry_run(finished_standin_run):
    stdout, stderr = finished_standin_run.output()
    assert "Plan of run" not in stdout + stderr
    config = finished_standin_run.config
    run_dir = Path(config["results_dir"]) / config["run"]
    assert (run_dir / "campaign.yaml").exists()
    assert to_json(build_plan(Campaign(validate_config(config)).single()))["total"]["done"] == 6  # batches
    # the campaign ends on the plan recorded at submission (its record job may run after a batch or two, which it
    # prices at what they took) against what its six batch records took
    recorded = json.loads((run_dir / "planned_cost.json").read_text())
    planned = recorded["gpu_hours"]
    assert recorded["batches"] == 6 and planned > 0
    if recorded["batches_done"] == 0:  # 15 episodes x 15 steps x the stand-in's documented 0.01 s
        assert planned == pytest.approx(15 * 15 * 0.01 / 3600)
    batches = sorted(run_dir.glob("standin/batches/*/*/*.json"))
    assert len(batches) == 6
    took = sum(json.loads(path.read_text())["duration_s"] for path in batches) / 3600
    line = f"planned {planned:.3g} GPU-h, took {took:.3g} GPU-h ({took / planned:.2f})"
    # after the last job, before only Snakemake's own closing lines (log path, elapsed time)
    assert stderr.index(f"cost: {line}") > stderr.rindex("(100%) done")
    assert f"Cost: {line}" in (run_dir / "landing.html").read_text()


def test_results_of_a_policy_no_longer_configured_are_named_once_and_kept(tmp_path):
    """A policy renamed in a sweep leaves its folder behind: the plan names it (once, not per policy), never
    deletes it; the run's own folders (policies, shared manifests, comparison, logs) are not named."""
    from conftest import standin_policy

    from evalwf.plan.table import render_campaign

    config = standin_config(tmp_path)
    del config["policy"]
    config.update(policies=[standin_policy("new-a"), standin_policy("new-b")], baseline="new-a")
    campaign = Campaign(validate_config(config))
    root = campaign.root
    for kept in ("new-a/standin/batches", "standin/manifests", "comparison/standin", "logs"):
        (root / kept).mkdir(parents=True)
    (root / "old-a" / "standin" / "batches" / "alpha").mkdir(parents=True)
    (root / "notes").mkdir()  # not results of any benchmark: not ours to name
    plans = [build_plan(member) for member in campaign.policy_campaigns()]
    text = render_campaign(campaign, plans)
    assert text.count("not part of this campaign") == 1
    assert f"not part of this campaign: {root / 'old-a'} (" in text and "delete it or rename it back" in text
    assert to_json(plans[0])["stale_results"] == [str(root / "old-a")]
    assert (root / "old-a" / "standin" / "batches" / "alpha").is_dir()
    # the same run name with one policy: the sweep's policy folders are not its results
    single = Campaign(validate_config(standin_config(tmp_path)))
    assert build_plan(single.single()).stale_results == [str(root / "new-a"), str(root / "old-a")]
