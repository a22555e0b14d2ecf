"""The RoboTwin config through Snakemake: the full dry run, and a small stand-in campaign under protocol main (the
stable_2.0 stand-in campaign end to end, through RoboTwin's Python 3.10 and in process: tests/workflow/
test_simulator_interpreter.py)."""

from __future__ import annotations

import json

import yaml
from conftest import REPO, job_counts, run_snakemake, write_config

from benchmarks.robotwin import protocols
from benchmarks.robotwin.checkout import checkout_identity
from benchmarks.robotwin.standin_layouts import lay_main_checkout


def test_robotwin_config_dry_run_plans_1000_batches(tmp_path):
    completed = run_snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(REPO / "config" / "robotwin.yaml"),
        str(REPO / "config" / "policies" / "standin.yaml"),
        "--config",
        f"results_dir={tmp_path}",
    )
    counts = job_counts(completed.stdout)
    assert counts["evaluate_batch"] == 1000  # 50 tasks x 100 episodes / 5
    assert counts["plan_manifest"] == 50
    assert counts["summarize_robotwin"] == 1
    # its interpreter and checkout are placeholders here: planned, with a note that nothing could run
    assert "NOTE: robotwin planned without its environment" in completed.stderr
    assert "/path/to/RoboTwin does not exist" in completed.stderr


def test_a_stand_in_campaign_under_protocol_main(tmp_path):
    """config/robotwin-standin.yaml cut to one task, one task config, 2 episodes in one batch, protocol main against
    the stand-in laid out as main's checkout, the instruction type left to the protocol: the manifest records the
    line and the checkout's identity, the suite is demo_clean's eval_instruction (seen), the batch has the manifest's
    seeds and texts (stable_2.0 stand-in campaigns: test_simulator_interpreter.py and the other workflow tests)."""
    root = lay_main_checkout(tmp_path / "RoboTwin-main")
    config = yaml.safe_load((REPO / "config" / "robotwin-standin.yaml").read_text())
    config["benchmarks"]["robotwin"].update(
        protocol="main", robotwin_root=str(root), tasks=["click_bell"], task_configs=["demo_clean"],
        instruction_types=None, episodes_per_task=2, batch_size=2,
    )  # fmt: skip
    config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
    run_snakemake(tmp_path, "--cores", "1", "--configfile", str(write_config(tmp_path / "c.yaml", config)))
    found = tmp_path / "results" / "robotwin-standin" / "robotwin"
    (manifest_path,) = (found / "manifests").rglob("*.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["definition"]["protocol"] == protocols.MAIN.identity
    assert manifest["definition"]["environment"]["checkout"] == checkout_identity(root)
    (batch_path,) = (found / "batches").rglob("*.json")
    batch = json.loads(batch_path.read_text())
    assert batch["suite"] == "demo_clean-seen"  # main: demo_clean's eval_instruction
    assert [r["setup"]["env_seed"] for r in batch["episodes"]] == [e["env_seed"] for e in manifest["episodes"]]
    assert [r["extra"]["instruction"] for r in batch["episodes"]] == [
        e["instruction_seen"] for e in manifest["episodes"]
    ]
    assert (found / "benchmark_summary.csv").is_file()
