"""Several policies in one campaign: a stand-in campaign of three policies run by two workers through
profiles/labtasker. Every batch is evaluated once, each policy's batches hold its own episodes, a policy's CSVs
equal a local run of that policy alone, policy affinity keeps the loads per worker within the number of policies + 1
(scripts/bench_affinity.py measures the count without affinity), and the comparison table across policies is
written."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import job_counts, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, LOCAL_PROFILE, REPO, all_tasks, client, labtasker_url, queue, workers

pytestmark = pytest.mark.slow

SUCCESS_COLUMNS = ["suite", "task", "successes", "episodes", "success_rate", "status"]
NOISE = {"step-1000": 1.4, "step-2000": 0.8, "step-3000": 0.3}
EPISODES_PER_TASK = 4
BATCHES_PER_POLICY = 6  # 3 tasks x 2 batches of 2: more batches than policies, so affinity has something to keep
REMOTE_JOBS = 3 + len(NOISE) * BATCHES_PER_POLICY  # the manifests are shared by the policies


def policy_block(name: str) -> dict:
    command = f"{{python}} -m benchmarks.standin.policy_server --port {{port}} --noise {NOISE[name]}"
    return {"name": name, "command": command, "checkpoint": name, "startup_timeout_s": 60}


def sweep_config(workdir: Path) -> Path:
    config = standin_config(workdir, standin={"episodes_per_task": EPISODES_PER_TASK})
    del config["policy"]
    config.update(policies=[policy_block(name) for name in NOISE], baseline="step-1000")
    return write_config(workdir / "sweep.yaml", config)


def table(path: Path, columns: list[str]) -> pd.DataFrame:
    return pd.read_csv(path)[columns].sort_values(columns[:2], ignore_index=True)


def job_step_runs(workdir: Path, task_id: str) -> int:
    return len(list((workdir / ".snakemake" / "labtasker" / "tasks" / task_id).glob("*.log")))


def run_campaign(workers, url: str, queue: str, client, workdir: Path, name: str, env: dict[str, str]) -> dict:
    """The sweep through the Labtasker profile on a fresh pair of workers; loads per worker, span, tasks."""
    configfile = sweep_config(workdir)
    supervisor, log_dir = workers.start(name, gpus="0,1", allow=[workdir, REPO], env=env)
    started = time.monotonic()
    # the queue looked at every second (the profile's 2 s is for real campaigns): the test waits for its rounds
    arguments = [*LABTASKER_PROFILE, "--seconds-between-status-checks", "1", "--configfile", str(configfile)]
    arguments += ["--labtasker-url", url]
    run_snakemake(workdir, *arguments, "--labtasker-queue", queue, timeout=600)
    span = time.monotonic() - started
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
    statuses = [json.loads(p.read_text()) for p in sorted(log_dir.glob("gpu*/status.json"))]
    ours = [t for t in all_tasks(client) if t.metadata.get("workflow") == str(workdir.resolve())]
    return {"loads": [s["policy_server_loads"] for s in statuses], "span": span, "tasks": ours}


def test_three_policies_two_workers_affinity_and_comparison(labtasker_url, queue, client, workers, tmp_path):
    workdir = tmp_path / "sweep"
    workdir.mkdir()

    # the dry run plans every batch under its policy and prints one plan per policy
    preview = run_snakemake(workdir, "-n", "--configfile", str(sweep_config(workdir)))
    counts = job_counts(preview.stdout)
    assert counts["evaluate_batch"] == len(NOISE) * BATCHES_PER_POLICY and counts["plan_manifest"] == 3
    assert all(counts[f"summarize_{name.replace('-', '_')}_standin"] == 1 for name in NOISE)
    assert counts["compare_policies_standin"] == 1
    for name in NOISE:
        assert f"policy identity: {name}@" in preview.stdout
        assert f"results/t/{name}/standin/batches/" in preview.stdout

    with_affinity = run_campaign(workers, labtasker_url, queue, client, workdir, "affinity", {})
    tasks = with_affinity["tasks"]
    assert len(tasks) == REMOTE_JOBS and {t.status for t in tasks} == {"succeeded"}
    runs = {t.name: job_step_runs(workdir, t.id) for t in tasks}
    assert set(runs.values()) == {1}, f"every batch evaluated exactly once; job-step runs per task: {runs}"
    batches = [t for t in tasks if t.name.startswith("evaluate_batch")]
    assert all(len(t.routes) == 2 for t in batches), "a batch is queued on its route and its policy's route"
    assert len({tuple(t.routes) for t in batches}) == len(NOISE)
    assert sum(with_affinity["loads"]) >= len(NOISE)
    assert all(loads <= len(NOISE) + 1 for loads in with_affinity["loads"]), with_affinity["loads"]

    # every policy's batches hold that policy's episodes only (their identity names its checkpoint), and one
    # policy's tables equal a local run of that policy alone (the other policies' tables are built the same way)
    for name in NOISE:
        files = sorted((workdir / "results" / "t" / name / "standin" / "batches").rglob("*.json"))
        assert len(files) == BATCHES_PER_POLICY
        assert {json.loads(f.read_text())["policy_identity"].split("@")[0] for f in files} == {name}
    name = "step-2000"
    alone = tmp_path / f"alone-{name}"
    alone.mkdir()
    config = standin_config(alone, standin={"episodes_per_task": EPISODES_PER_TASK}, policy=policy_block(name))
    run_snakemake(alone, *LOCAL_PROFILE, "--configfile", str(write_config(alone / "alone.yaml", config)))
    ours, theirs = workdir / "results" / "t" / name / "standin", alone / "results" / "t" / "standin"
    for csv, columns in (
        ("task_summary.csv", SUCCESS_COLUMNS),
        ("suite_summary.csv", ["suite", "successes", "episodes", "success_rate"]),
    ):
        pd.testing.assert_frame_equal(table(ours / csv, columns), table(theirs / csv, columns), obj=f"{name} {csv}")

    # the comparison across checkpoints: every policy per suite and task, the difference to the baseline
    directory = workdir / "results" / "t" / "comparison" / "standin"
    suites = pd.read_csv(directory / "policy_comparison.csv", keep_default_na=False)
    per_suite = suites[suites["level"] == "suite"]
    assert sorted(per_suite["policy"].unique()) == sorted(NOISE) and len(per_suite) == 2 * len(NOISE)
    baseline = per_suite[per_suite["policy"] == "step-1000"]
    assert set(baseline["significant"]) == {"baseline"} and set(baseline["difference_pp"]) == {""}
    others = per_suite[per_suite["policy"] != "step-1000"]
    assert all(
        float(low) <= float(d) <= float(high)
        for low, d, high in others[["ci95_low_pp", "difference_pp", "ci95_high_pp"]].values
    )
    tasks_table = pd.read_csv(directory / "policy_comparison_tasks.csv")
    assert len(tasks_table) == 3 * len(NOISE)
    markdown = (directory / "policy_comparison.md").read_text()
    assert "Newcombe" in markdown and "step-3000" in markdown
    assert (directory / "success_by_policy.png").stat().st_size > 1000

    print(f"\npolicy server loads per worker with affinity: {with_affinity['loads']}")
    print(markdown.split("## Tasks")[0])


def test_a_broken_policy_server_does_not_stall_the_other_policies(tmp_path):
    """Per-policy gather targets and keep-going: the good policy is summarised, the broken one fails alone."""
    config = standin_config(tmp_path, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 4})
    del config["policy"]
    broken = {"name": "broken", "command": "{python} -m benchmarks.standin.no_such_server --port {port}"}
    config["policies"] = [policy_block("step-3000"), {**broken, "startup_timeout_s": 20}]
    configfile = write_config(tmp_path / "broken.yaml", config)
    completed = run_snakemake(tmp_path, *LOCAL_PROFILE, "--configfile", str(configfile), check=False)
    assert completed.returncode != 0 and "PolicyServerError" in completed.stdout + completed.stderr
    root = tmp_path / "results" / "t"
    good = pd.read_csv(root / "step-3000" / "standin" / "task_summary.csv")
    assert good["episodes"].sum() == 4
    assert not (root / "broken" / "standin" / "task_summary.csv").exists()
    assert not (root / "comparison").exists()
