"""What a tracker run holds, read from a run's folder: one per (policy, benchmark) of a sweep, each under its own
key; the environment batches record, shown mixed when they differ; a run not summarised yet refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import missing_facts
from runkit import fabricate_sweep

from evalwf.export.run_record import ExportError, tracker_runs
from evalwf.report.aggregate import summarize_benchmark
from evalwf.rules.jobs import record_campaign


def sweep(tmp_path: Path, summarised: bool = True):
    campaign = fabricate_sweep(
        tmp_path, ["ckpt-a", "ckpt-b"], lambda policy, batch: True, lambda policy, suite, task, i: i % 2 == 0
    )
    record_campaign(campaign.config, str(campaign.root / "campaign.yaml"))
    for member in campaign.policy_campaigns() if summarised else []:
        summarize_benchmark(member, "standin", member.summary_paths("standin"), echo=False)
    return campaign


def test_each_policy_of_a_sweep_is_its_own_tracker_run_and_mixed_environments_show(tmp_path):
    campaign = sweep(tmp_path)
    batches = sorted((campaign.root / "ckpt-b" / "standin" / "batches").rglob("*.json"))
    for index, path in enumerate(batches):  # two kinds of node among ckpt-b's batches
        document = json.loads(path.read_text())
        document["environment"] = {"gpu": {"model": "H100" if index else "A100"}, "renderer": "EGL"}
        path.write_text(json.dumps(document))
    a, b = tracker_runs(campaign.root)
    assert (a.name, b.name) == ("t/ckpt-a/standin", "t/ckpt-b/standin") and a.digest != b.digest
    assert a.policy_identity != b.policy_identity and a.metrics == b.metrics  # the same outcomes, other policies
    assert a.metrics["task/alpha/reach/successes"] == 3 and a.metrics["task/alpha/reach/episodes"] == 5
    assert b.params["batch_environment.gpu.model"] == "A100 | H100"
    assert b.params["batch_environment.renderer"] == "EGL"
    assert not any(key.startswith("batch_environment") for key in a.params)
    assert {path.name for _, path in b.artifacts} >= {"task_summary.csv", "summary.html", "campaign.yaml"}
    assert all("ckpt-b" in str(path) for folder, path in b.artifacts if folder == "summary")


def test_a_run_not_summarised_yet_is_refused_naming_the_missing_table(tmp_path):
    campaign = sweep(tmp_path, summarised=False)
    with pytest.raises(ExportError) as error:
        tracker_runs(campaign.root)
    facts = [str(campaign.root / "ckpt-a" / "standin" / "task_summary.csv"), "not summarised yet", "finish the run"]
    assert not missing_facts(str(error.value), *facts), str(error.value)
