"""A campaign composed of one file per benchmark plus one policy file, each benchmark with its own policy, through a
real Snakemake run (profiles/local: each batch starts its own policy server): every benchmark's batches are
evaluated by, and carry the identity of, the policy meant for that benchmark."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import REPO, run_snakemake, two_benchmark_config, write_config

from evalwf.policy.spec import PolicySpec

LOCAL_PROFILE = ["--profile", str(REPO / "profiles" / "local")]


@pytest.mark.slow  # one batch per benchmark, each starting its own policy server
def test_each_benchmark_is_evaluated_by_its_own_policy(tmp_path):
    config = two_benchmark_config(
        tmp_path,
        standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2},
        robotwin={"episodes_per_task": 2, "batch_size": 2},
    )
    policies = {name: section.pop("policy") for name, section in config["benchmarks"].items()}
    benchmark_files = [
        write_config(tmp_path / f"{name}.yaml", {"benchmarks": {name: section}})
        for name, section in config["benchmarks"].items()
    ]
    policy_file = {key: config[key] for key in ("run", "results_dir", "manifest_cache")}
    policy_file["benchmarks"] = {name: {"policy": block} for name, block in policies.items()}
    configfiles = [*benchmark_files, write_config(tmp_path / "policy.yaml", policy_file)]

    run_snakemake(tmp_path, *LOCAL_PROFILE, "--configfile", *map(str, configfiles), timeout=600)

    run = tmp_path / "results" / "t"
    identities = {name: PolicySpec.from_config(block).identity for name, block in policies.items()}
    for benchmark, block in policies.items():
        batches = sorted((run / block["name"] / benchmark / "batches").rglob("*.json"))
        assert len(batches) == 1
        assert {json.loads(path.read_text())["policy_identity"] for path in batches} == {identities[benchmark]}
        summary = (run / block["name"] / benchmark / "summary.md").read_text()
        assert f"Policy: `{identities[benchmark]}`" in summary
        assert (run / benchmark / "manifests").is_dir(), "manifests stay shared per benchmark"
    assert not (run / "comparison").exists(), "no benchmark is evaluated by two policies"
    snapshot = yaml.safe_load((run / "campaign.yaml").read_text())
    assert snapshot["benchmark_policies"] == {"standin": ["standin-policy"], "robotwin": ["robotwin-policy"]}
    assert snapshot["policy_identities"] == {policies[b]["name"]: identities[b] for b in policies}

    again = run_snakemake(tmp_path, *LOCAL_PROFILE, "-n", "--configfile", *map(str, configfiles))
    assert "Nothing to be done" in again.stdout + again.stderr
