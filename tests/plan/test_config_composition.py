"""Config files compose (one per benchmark, one per policy) and a benchmark's section may name its own policy: each
benchmark is evaluated by the policy meant for it, files that disagree are refused, and a benchmark file without a
policy names the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, standin_config, standin_policy, two_benchmark_config, write_config

from evalwf.common.errors import ConfigError
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config


def files(tmp_path: Path, **documents: dict) -> list[Path]:
    return [write_config(tmp_path / f"{name}.yaml", document) for name, document in documents.items()]


# -- composition ---------------------------------------------------------------------------------------------------


def test_shipped_benchmark_files_with_a_policy_file_give_each_benchmark_its_policy():
    config = load_config(*(REPO / "config" / n for n in ("libero.yaml", "robotwin.yaml", "policies/openpi.yaml")))
    campaign = Campaign(config)
    assert campaign.assignment == {"libero": ["pi05-libero"], "robotwin": ["pi0-robotwin"]}
    assert campaign.member("pi05-libero").policy.checkpoint == "gs://openpi-assets/checkpoints/pi05_libero"
    assert "serve_openpi.py" in campaign.member("pi0-robotwin").policy.command
    standin = Campaign(
        load_config(*(REPO / "config" / n for n in ("libero.yaml", "robotwin.yaml", "policies/standin.yaml")))
    )
    commands = {name: m.policy.command for name, m in standin.members.items()}
    assert "--action-dim 7" in commands["standin-policy"] and "--action-dim 14" in commands["standin-policy-14"]


def test_files_that_agree_compose_and_config_overrides_win(tmp_path):
    config = standin_config(tmp_path)
    benchmark = {"benchmarks": config["benchmarks"]}
    policy_file = {key: config[key] for key in ("run", "results_dir", "manifest_cache", "policy")}
    policy_file["benchmarks"] = {"standin": {"episodes_per_task": 5}}  # the same value twice is no conflict
    merged = load_config(*files(tmp_path, bench=benchmark, pol=policy_file), overrides={"run": "other"})
    assert merged.run == "other" and merged.benchmarks["standin"].episodes_per_task == 5
    assert merged == validate_config({**config, "run": "other"})


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ({"run": "a"}, {"run": "b"}, "config key 'run' is set to 'a' in {a} and 'b' in {b}"),
        (
            {"benchmarks": {"standin": {"batch_size": 2}}},
            {"benchmarks": {"standin": {"batch_size": 3}}},
            "config key 'benchmarks.standin.batch_size' is set to 2 in {a} and 3 in {b}",
        ),
        (  # a policy block is one value: two files naming a benchmark's policy must name the same one
            {"benchmarks": {"standin": {"policy": standin_policy("p")}}},
            {"benchmarks": {"standin": {"policy": {**standin_policy("p"), "startup_timeout_s": 5}}}},
            "config key 'benchmarks.standin.policy' is set to policy 'p' in {a} and policy 'p' in {b}",
        ),
        (
            {"policy": standin_policy("p")},
            {"policies": [standin_policy("q"), standin_policy("r")]},
            "config keys 'policy' (in {a}) and 'policies' (in {b}) both give the policy of the same benchmarks",
        ),
        (
            {"benchmarks": {"standin": {"policies": [standin_policy("q")]}}},
            {"benchmarks": {"standin": {"policy": standin_policy("p")}}},
            "config keys 'benchmarks.standin.policies' (in {a}) and 'benchmarks.standin.policy' (in {b})",
        ),
    ],
)
def test_files_that_disagree_are_refused_naming_the_key_and_both_files(tmp_path, first, second, message):
    """Snakemake's own merge lets the later file win: two benchmark files that each named a policy evaluated both
    benchmarks with the last one."""
    a, b = files(tmp_path, first=first, second=second)
    with pytest.raises(ConfigError) as refused:
        load_config(a, b)
    assert message.format(a=a, b=b) in str(refused.value)
    assert "must not disagree" in str(refused.value)


def test_a_benchmark_file_alone_names_the_policy_file_it_needs():
    with pytest.raises(ConfigError) as refused:
        load_config(REPO / "config" / "libero.yaml")
    assert "no policy for benchmark(s) libero: a benchmark file holds the benchmark's settings only" in str(
        refused.value
    )
    assert "--configfile config/libero.yaml config/policies/standin.yaml" in str(refused.value)
    with pytest.raises(ConfigError, match="no benchmark is configured: the config files give policies for libero"):
        load_config(REPO / "config" / "policies" / "standin.yaml")
    no_run = {"policy": standin_policy("p"), "benchmarks": standin_config(Path("/tmp"))["benchmarks"]}
    with pytest.raises(ConfigError, match=r"config key 'run' is missing: .* the policy file names it"):
        validate_config(no_run)


def test_a_policy_file_section_for_a_benchmark_not_configured_is_left_out():
    campaign = Campaign(load_config(REPO / "config" / "libero.yaml", REPO / "config" / "policies" / "standin.yaml"))
    assert campaign.benchmarks == ["libero"] and not campaign.multi
    assert campaign.single().policy.name == "standin-policy"


# -- the campaign: which policy evaluates which benchmark ----------------------------------------------------------


def test_each_benchmark_is_evaluated_by_its_own_policy_under_that_policys_folder(tmp_path):
    campaign = Campaign(validate_config(two_benchmark_config(tmp_path)))
    assert campaign.multi and list(campaign.members) == ["standin-policy", "robotwin-policy"]
    assert campaign.member("standin-policy").benchmarks == ["standin"]
    assert campaign.member("robotwin-policy").benchmarks == ["robotwin"]
    root = tmp_path / "results" / "t"
    for name, member in campaign.members.items():
        [benchmark] = member.benchmarks
        assert {b.ref.benchmark for b in member.batches()} == {benchmark}
        assert all(b.path.startswith(f"{root}/{name}/{benchmark}/batches/") for b in member.batches())
        assert list(member.manifests()) == list(campaign.manifests(benchmark))  # shared: results/<run>/<benchmark>/
    assert campaign.compared_benchmarks() == [], "no benchmark is evaluated by two policies"
    assert "policy" not in campaign.section("robotwin"), "the section a batch gets holds the benchmark's settings"


def test_a_comparison_only_for_benchmarks_that_several_policies_evaluate(tmp_path):
    sweep = [standin_policy("a", "--noise 1"), standin_policy("b", "--noise 2")]
    config = two_benchmark_config(tmp_path, standin={"policy": None, "policies": sweep, "baseline": "b"})
    campaign = Campaign(validate_config(config))
    assert campaign.compared_benchmarks() == ["standin"]
    assert [m.policy.name for m in campaign.policies_of("standin")] == ["a", "b"]
    assert campaign.baseline_of("standin") == "b" and campaign.baseline_of("robotwin") == "robotwin-policy"


def test_one_policy_for_everything_keeps_the_paths_and_digests_of_a_single_policy_run(tmp_path):
    """Moving the policy from the top level into the benchmark's section (a policy file) reruns nothing."""
    top = standin_config(tmp_path)
    section = {key: value for key, value in top.items() if key != "policy"}
    section["benchmarks"] = {"standin": {**top["benchmarks"]["standin"], "policy": top["policy"]}}
    before, after = Campaign(validate_config(top)), Campaign(validate_config(section))
    assert not after.multi
    assert [b.path for b in after.batches()] == [b.path for b in before.batches()]
    assert after.results_digest() == before.results_digest()
    assert after.settings_digest("standin") == before.settings_digest("standin")
    assert after.single().policy.identity == before.single().policy.identity


# -- every policy block is validated, wherever it is ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": standin_policy("p") | {"command": "serve --gpu {gpu}"}}, "key 'benchmarks.standin.policy.command'"),
        (
            {"policy": None, "policies": [standin_policy("p"), standin_policy("p", "--noise 2")]},
            "'benchmarks.standin.policies': names must be unique",
        ),
        (
            {"policy": standin_policy("robotwin-policy", "--noise 3")},
            "policy name 'robotwin-policy' is given two different",
        ),
        ({"policy": standin_policy("comparison")}, "the name of a benchmark or a folder of the run"),
        ({"baseline": "standin-policy"}, "'benchmarks.standin.baseline': only with 'benchmarks.standin.policies'"),
        (
            {"policies": [standin_policy("x")]},
            "give only one of 'benchmarks.standin.policy' or 'benchmarks.standin.policies'",
        ),
    ],
)
def test_section_policies_are_validated_like_the_top_level_ones(tmp_path, change, message):
    with pytest.raises(ConfigError) as refused:
        validate_config(two_benchmark_config(tmp_path, standin=change))
    assert message in str(refused.value)


def test_status_lists_each_policys_batches_of_its_own_benchmark(tmp_path):
    from evalwf.report import run_state
    from evalwf.rules import jobs

    config = validate_config(two_benchmark_config(tmp_path))
    assert validate_config(config) == config, "the snapshot validates to itself"
    jobs.record_campaign(config, str(tmp_path / "results" / "t" / "campaign.yaml"))
    campaign = run_state.load_run(tmp_path / "results" / "t", tmp_path)
    rows = run_state.batch_rows(campaign, None)
    assert {row["benchmark"] for row in rows} == {"standin-policy/standin", "robotwin-policy/robotwin"}
    assert len(rows) == len(Campaign(config).batches())
