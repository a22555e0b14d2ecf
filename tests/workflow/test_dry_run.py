"""`snakemake -n` expands the shipped configs into exactly one evaluate_batch job per episode batch."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from conftest import REPO, job_counts, run_snakemake, standin_config, write_config
from runkit import fabricate_run


def dry_run(tmp_path, *configs: str) -> dict[str, int]:
    args = ["-n", "--configfile", *[str(REPO / "config" / c) for c in configs], "--config", f"results_dir={tmp_path}"]
    return job_counts(run_snakemake(tmp_path, *args).stdout)


def test_demo_config_plans_every_batch(tmp_path):
    counts = dry_run(tmp_path, "demo.yaml")
    assert counts["evaluate_batch"] == 4  # libero_spatial tasks 0-1 x 2 trials, batches of 1
    assert counts["plan_manifest"] == 2
    assert counts["summarize_libero"] == 1


def test_standin_config_plans_every_batch(tmp_path):
    counts = dry_run(tmp_path, "standin.yaml")
    assert counts["evaluate_batch"] == 9
    assert counts["plan_manifest"] == 3
    assert counts["summarize_standin"] == 1


def test_libero_config_plans_400_batches(tmp_path):
    counts = dry_run(tmp_path, "libero.yaml", "policies/standin.yaml")
    assert counts["evaluate_batch"] == 400
    assert counts["plan_manifest"] == 40
    assert counts["summarize_libero"] == 1  # one policy: the paths of a single-policy run


def test_both_benchmark_files_with_a_policy_file_plan_each_benchmark_with_its_policy(tmp_path):
    """The README's composition: one file per benchmark plus one policy file naming each benchmark's policy. Each
    benchmark is planned once, by its own policy (400 + 1000 batches), under that policy's folder."""
    # How long this takes is measured, not asserted: the README quotes `time snakemake -n ...`.
    args = ["libero.yaml", "robotwin.yaml", "policies/standin.yaml"]
    completed = run_snakemake(
        tmp_path, "-n", "--configfile", *[str(REPO / "config" / c) for c in args], "--config", f"results_dir={tmp_path}"
    )
    counts = job_counts(completed.stdout)
    assert counts["evaluate_batch"] == 1400
    assert counts["plan_manifest"] == 90
    assert counts["summarize_standin_policy_libero"] == counts["summarize_standin_policy_14_robotwin"] == 1
    assert not [job for job in counts if job.startswith("compare_policies")], "no benchmark has two policies"
    assert "policy identity: standin-policy@" in completed.stdout and "(evaluates libero)" in completed.stdout
    assert "policy identity: standin-policy-14@" in completed.stdout and "(evaluates robotwin)" in completed.stdout
    for policy, benchmark in (("standin-policy", "libero"), ("standin-policy-14", "robotwin")):
        assert f"{tmp_path}/standin-full/{policy}/{benchmark}/batches/" in completed.stdout


def test_a_benchmark_file_alone_names_the_policy_file_it_needs(tmp_path):
    completed = run_snakemake(
        tmp_path, "-n", "--configfile", str(REPO / "config" / "libero.yaml"), "--config", f"results_dir={tmp_path}",
        check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    output = completed.stdout + completed.stderr
    assert "no policy for benchmark(s) libero" in output
    assert "--configfile config/libero.yaml config/policies/standin.yaml" in output
    assert "evaluate_batch" not in output


def test_config_files_that_disagree_are_refused_naming_the_key_and_both_files(tmp_path):
    """Snakemake itself would let the later file win; the workflow refuses, before any job."""
    completed = run_snakemake(
        tmp_path, "-n", "--configfile", str(REPO / "config" / "standin.yaml"),
        str(REPO / "config" / "policies" / "standin.yaml"), check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    output = completed.stdout + completed.stderr
    config = REPO / "config"
    assert (
        f"config key 'run' is set to 'standin-demo' in {config}/standin.yaml and 'standin-full' in "
        f"{config}/policies/standin.yaml: config files compose" in output
    )
    assert "evaluate_batch" not in output


def test_invalid_config_fails_before_any_job_with_one_clear_message(tmp_path):
    config = standin_config(tmp_path, standin={"batch_size": 0})
    completed = run_snakemake(
        tmp_path, "-n", "--configfile", str(write_config(tmp_path / "bad.yaml", config)), check=False
    )
    assert completed.returncode != 0
    output = completed.stdout + completed.stderr
    assert "config key 'benchmarks.standin.batch_size'" in output
    assert "evaluate_batch" not in output


def _tree(root: Path, skip: Path) -> dict[str, tuple[str, int, int, str]]:
    """Every entry under `root` but `skip`: its kind, mode, mtime (a directory's changes when an entry is created
    or removed in it, even a file written and deleted again) and a file's content hash."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        if path == skip or skip in path.parents:
            continue
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        kind = "dir" if path.is_dir() else "file"
        found[str(path.relative_to(root))] = (kind, info.st_mode, info.st_mtime_ns, digest)
    return found


def test_a_dry_run_writes_nothing_but_manifests_restored_from_the_cache(tmp_path):
    """`snakemake -n` on a campaign half done leaves every file and directory as it was (nothing written, not even
    a probe file removed again), except a missing sealed manifest put back byte for byte from the cache."""
    data = tmp_path / "data"
    data.mkdir()
    campaign = fabricate_run(data, lambda suite, task, index: index % 2 == 0, skip={"reach/0002-2", "open/0000-2"})
    plan = campaign.task_plan("standin", "alpha", "push")
    restored = Path(plan.manifest_path)
    cached = Path(campaign.config.manifest_cache) / "standin" / f"{plan.manifest_hash}.json"
    restored.unlink()  # its directory keeps the task reach's manifest
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = write_config(workdir / "c.yaml", standin_config(data))
    before = _tree(tmp_path, workdir / ".snakemake")
    time.sleep(0.05)  # a directory touched by the dry run gets another mtime than the one recorded
    completed = run_snakemake(workdir, "-n", "--configfile", str(configfile))
    assert job_counts(completed.stdout)["evaluate_batch"] == 2, completed.stdout[-2000:]
    after = _tree(tmp_path, workdir / ".snakemake")
    assert restored.read_bytes() == cached.read_bytes(), "the restored manifest is the cache's, byte for byte"
    allowed = {
        str(restored.relative_to(tmp_path)),  # the copy from the cache
        str(restored.parent.relative_to(tmp_path)),  # the directory it was put in
        str(workdir.relative_to(tmp_path)),  # Snakemake's own .snakemake/ was created there
    }
    changed = sorted(key for key in (set(before) | set(after)) - allowed if before.get(key) != after.get(key))
    assert not changed, f"the dry run changed {changed}"
