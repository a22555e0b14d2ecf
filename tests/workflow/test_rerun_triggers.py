"""Only what changes results reruns work (DESIGN invariant 8).

A real finished run with the local profile; then each operational setting is changed and `snakemake -n` must
find nothing to do, while a change of what defines results (the policy command, the episodes' seed) must rerun
exactly the batches it affects. A deleted manifest is rebuilt byte for byte without re-evaluating a batch.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, job_counts, run_snakemake, standin_config, write_config

LOCAL = ["--profile", str(REPO / "profiles" / "local")]
LABTASKER = ["--profile", str(REPO / "profiles" / "labtasker")]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("triggers")
    # two tasks of two batches each (4 batch jobs): enough to tell "its batches" from "every batch"
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"], "beta": ["open"]}, "episodes_per_task": 4})
    configfile = write_config(workdir / "campaign.yaml", config)
    run_snakemake(workdir, *LOCAL, "--configfile", str(configfile))
    return workdir, config


def preview(workdir: Path, config: dict, *extra: str, profile: list[str] = LOCAL) -> dict[str, int]:
    configfile = write_config(workdir / "changed.yaml", config)
    completed = run_snakemake(workdir, *profile, "--configfile", str(configfile), "-n", *extra)
    return job_counts(completed.stdout)


def batch_mtimes(workdir: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (workdir / "results" / "t" / "standin" / "batches").rglob("*.json")}


# Operational settings, tried together: a change that reruns batches would rerun them in any company (it is in the
# job's params, its code or its inputs either way), so one dry run per profile proves each of them and costs one
# Snakemake start instead of one per key. startup_timeout_s is tried both ways, hence two sets. On a failure each
# key of the set is tried alone, to name it.
OPERATIONAL_CHANGES = [
    [
        (("policy", "startup_timeout_s"), 120),
        (("policy", "infer_timeout_s"), 7),
        (("benchmarks", "standin", "step_time_s"), {"default": 0.01}),
        (("benchmarks", "standin", "record_video"), "failures"),
        (("benchmarks", "standin", "faults"), [{"task": "push", "kind": "raise"}]),
    ],
    [(("policy", "startup_timeout_s"), 5)],
]


def changed_config(config: dict, changes: list[tuple[tuple[str, ...], object]]) -> dict:
    changed = copy.deepcopy(config)
    for key, value in changes:
        parent = changed
        for part in key[:-1]:
            parent = parent[part]
        parent[key[-1]] = value
    return changed


@pytest.mark.parametrize("changes", OPERATIONAL_CHANGES, ids=["operational-keys", "shorter-startup"])
@pytest.mark.parametrize("profile", [LOCAL, LABTASKER], ids=["local", "labtasker"])
def test_operational_policy_keys_rerun_nothing(finished, changes, profile):
    workdir, config = finished
    if preview(workdir, changed_config(config, changes), profile=profile) != {}:
        rerunning = [
            key
            for key, value in changes
            if preview(workdir, changed_config(config, [(key, value)]), profile=profile) != {}
        ]
        pytest.fail(f"changing {['.'.join(key) for key in rerunning] or changes} must not rerun finished batches")


@pytest.mark.parametrize(
    "options",
    # the local profile's options together (one dry run, as above), the plugin's under its profile
    [
        ["--retries", "5", "--latency-wait", "90", "--cores", "1"],
        ["--labtasker-max-attempts", "3", "--labtasker-priority", "7"],
    ],
)
def test_operational_snakemake_options_rerun_nothing(finished, options):
    workdir, config = finished
    profile = LABTASKER if options[0].startswith("--labtasker") else LOCAL
    assert preview(workdir, config, *options, profile=profile) == {}


def test_policy_identity_change_reruns_every_batch(finished):
    workdir, config = finished
    changed = copy.deepcopy(config)
    changed["policy"]["command"] += " --horizon 8"
    counts = preview(workdir, changed)
    assert counts.get("evaluate_batch") == 4, counts


@pytest.mark.parametrize(("key", "value"), [("max_steps", 12), ("replan_steps", 3), ("tolerance", 0.3)])
def test_episode_shaping_setting_change_reruns_the_benchmarks_batches(finished, key, value):
    workdir, config = finished
    changed = copy.deepcopy(config)
    changed["benchmarks"]["standin"][key] = value
    counts = preview(workdir, changed)
    assert (counts.get("evaluate_batch"), counts.get("plan_manifest")) == (4, None), counts


def test_episode_definition_change_reruns_its_batches(finished):
    workdir, config = finished
    changed = copy.deepcopy(config)
    changed["benchmarks"]["standin"]["seed"] = 123
    counts = preview(workdir, changed)
    assert counts.get("evaluate_batch") == 4 and counts.get("plan_manifest") == 2, counts


def test_deleted_manifest_reruns_no_finished_batch(finished):
    """Mid-campaign (no summary yet) a deleted sealed manifest comes back byte for byte; of its task only the
    missing batch runs."""
    workdir, config = finished
    configfile = str(write_config(workdir / "changed.yaml", config))
    victim = sorted((workdir / "results" / "t" / "standin" / "manifests").rglob("*.json"))[0]
    sealed = victim.read_bytes()
    task_batches = sorted((workdir / "results" / "t" / "standin" / "batches" / "alpha" / "reach").glob("*.json"))
    victim.unlink()
    task_batches[0].unlink()
    (workdir / "results" / "t" / "standin" / "task_summary.csv").unlink()
    kept = {p: m for p, m in batch_mtimes(workdir).items() if p != task_batches[0]}
    counts = preview(workdir, config)
    assert counts.get("evaluate_batch") == 1, counts
    run_snakemake(workdir, *LOCAL, "--configfile", configfile)
    assert victim.read_bytes() == sealed
    assert {p: m for p, m in batch_mtimes(workdir).items() if p in kept} == kept, "no finished batch may rerun"
    assert preview(workdir, config) == {}


def test_manifest_rebuilt_from_scratch_invalidates_nothing(finished):
    """Without the cache, a rebuilt manifest has a newer mtime (and build time) but the same sealed content: no
    batch reruns."""
    workdir, config = finished
    configfile = str(write_config(workdir / "changed.yaml", config))
    victim = sorted((workdir / "results" / "t" / "standin" / "manifests").rglob("*.json"))[0]
    sealed = json.loads(victim.read_text())["content_sha256"]
    victim.unlink()
    shutil.rmtree(workdir / "cache")
    run_snakemake(workdir, *LOCAL, str(victim), "--configfile", configfile)
    assert json.loads(victim.read_text())["content_sha256"] == sealed
    assert preview(workdir, config) == {}, "a rebuilt manifest of the same content invalidates nothing"
