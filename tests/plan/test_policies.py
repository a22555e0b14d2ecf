"""Several policies in one campaign: config checks, the plan per policy, and the affinity routes."""

from __future__ import annotations

import pytest
from conftest import standin_config

from evalwf.common.errors import ConfigError
from evalwf.contract.affinity import affinity_route, task_routes
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config


def several(tmp_path, names=("a", "b", "c"), **extra):
    config = standin_config(tmp_path)
    block = config.pop("policy")
    config["policies"] = [{**block, "name": name, "checkpoint": name} for name in names]
    config.update(extra)
    return config


def test_policies_plan_each_policy_under_its_folder_and_share_the_manifests(tmp_path):
    config = validate_config(several(tmp_path))
    campaign = Campaign(config)
    assert campaign.multi and campaign.baseline.policy.name == "a" and "baseline" not in config.document()
    assert list(campaign.members) == ["a", "b", "c"]
    identities = {m.policy.identity for m in campaign.policy_campaigns()}
    assert len(identities) == 3
    root = tmp_path / "results" / "t"
    for name, member in campaign.members.items():
        assert all(batch.path.startswith(str(root / name / "standin" / "batches")) for batch in member.batches())
        assert member.summary_paths("standin")["tasks"] == str(root / name / "standin" / "task_summary.csv")
        assert list(member.manifests()) == list(campaign.manifests())  # the same episodes for every policy
    assert len({m.results_digest() for m in campaign.policy_campaigns()}) == 3


def test_single_policy_paths_are_unchanged(tmp_path):
    campaign = Campaign(validate_config(standin_config(tmp_path)))
    assert not campaign.multi and campaign.policy_campaigns() == [campaign.single()]
    assert campaign.single().batches()[0].path.startswith(str(tmp_path / "results" / "t" / "standin" / "batches"))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (lambda p: several(p, names=("a", "a")), "names must be unique"),
        (lambda p: several(p, baseline="z"), "'baseline': 'z' is not one of"),
        (lambda p: several(p, names=("standin", "b")), "the name of a benchmark or a folder"),
        (lambda p: several(p, names=("comparison",)), "the name of a benchmark or a folder"),
        (lambda p: {**standin_config(p), "baseline": "x"}, "only with 'policies'"),
        (lambda p: {**several(p), "policy": standin_config(p)["policy"]}, "give only one of 'policy' or 'policies'"),
    ],
)
def test_invalid_policies(tmp_path, config, expected):
    with pytest.raises(ConfigError, match=expected):
        validate_config(config(tmp_path))


def test_affinity_routes_only_for_a_campaign_of_several_policies():
    several_args = {"policy_identity": "a@1", "wildcards": [{"policy": "a", "benchmark": "standin"}]}
    routes = task_routes("default", several_args)
    assert routes == sorted(["default", affinity_route("default", "a@1")])
    assert affinity_route("default", "a@1") != affinity_route("default", "b@1")
    assert task_routes("default", {"policy_identity": "a@1", "wildcards": [{"benchmark": "standin"}]}) == ["default"]
    assert task_routes("default", {"policy_identity": None, "wildcards": [{"policy": "a"}]}) == ["default"]


def test_status_reads_the_snapshot_of_several_policies_and_lists_each_policys_batches(tmp_path):
    from evalwf.report import run_state
    from evalwf.rules import jobs

    config = validate_config(several(tmp_path))
    run_dir = tmp_path / "results" / "t"
    jobs.record_campaign(config, str(run_dir / "campaign.yaml"))
    campaign = run_state.load_run(run_dir, tmp_path)
    assert campaign.multi and campaign.baseline.policy.name == "a"
    rows = run_state.batch_rows(campaign, None)
    assert {row["benchmark"] for row in rows} == {"a/standin", "b/standin", "c/standin"}
    assert len(rows) == 3 * len(Campaign(config).batches())


def test_a_policy_sweep_is_one_command_over_several_checkpoints(tmp_path):
    config = standin_config(tmp_path)
    command = config.pop("policy")["command"] + " --checkpoint {checkpoint}"
    config["policy_sweep"] = {"command": command, "checkpoints": {"s1": "ckpt/1", "s2": "ckpt/2"}, "env": {"X": "1"}}
    config["baseline"] = "s2"
    validated = validate_config(config)
    document = validated.document()
    assert "policy_sweep" not in document and [b["name"] for b in document["policies"]] == ["s1", "s2"]
    campaign = Campaign(validated)
    assert campaign.baseline.policy.name == "s2"
    assert campaign.member("s1").policy.command.endswith("--checkpoint ckpt/1")
    assert campaign.member("s2").policy.checkpoint == "ckpt/2" and campaign.member("s2").policy.env == {"X": "1"}
    with pytest.raises(ConfigError, match="must contain"):
        validate_config(
            {**config, "policy_sweep": {"command": command.split(" --checkpoint")[0], "checkpoints": {"a": "b"}}}
        )
    with pytest.raises(ConfigError, match="give only one of"):
        validate_config({**config, "policies": document["policies"]})
