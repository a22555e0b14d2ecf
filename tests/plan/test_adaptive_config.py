"""The `adaptive:` block: defaults from the schema only, a clear error where rounds cannot work, and the round
plan (which batches a round holds, how many rounds a dropped policy ran) that the Snakefile and the reports share."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import standin_config

from evalwf.common.errors import ConfigError
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.plan.rounds import (
    AdaptiveSettings,
    adaptive_benchmarks,
    planned_batches,
    round_batches,
    round_count,
    rounds_evaluated,
)


def sweep(tmp_path: Path, adaptive: dict | None, **standin: object) -> dict:
    config = standin_config(tmp_path, standin={"episodes_per_task": 20, "batch_size": 5, **standin})
    policy = config.pop("policy")
    config["policies"] = [{**policy, "name": "a"}, {**policy, "name": "b"}]
    if adaptive is not None:
        config["adaptive"] = adaptive
    return config


def test_the_defaults_come_from_the_schema_and_it_is_off_unless_given(tmp_path):
    assert AdaptiveSettings.of(validate_config(sweep(tmp_path, None))) is None
    settings = AdaptiveSettings.of(validate_config(sweep(tmp_path, {})))
    assert settings == AdaptiveSettings(0.05, "worse-than-best", 0.0, 10, 5, speculate_rounds=0)
    given = AdaptiveSettings.of(validate_config(sweep(tmp_path, {"margin_pp": 5, "drop": "worse-than-baseline"})))
    assert given.margin == pytest.approx(0.05) and given.drop == "worse-than-baseline"


@pytest.mark.parametrize(
    ("adaptive", "standin", "message"),
    [
        ({"round_episodes": 4}, {}, r"'adaptive.round_episodes': 4 is not a multiple of benchmarks.standin.batch_size"),
        ({"round_episodes": 20}, {}, r"'adaptive.round_episodes': 20 leaves a single round"),
        ({"min_episodes": 20}, {}, r"'adaptive.min_episodes': 20 is not less than"),
        ({"drop": "worse-than-worst"}, {}, r"adaptive.drop"),
        ({"alpha": 0}, {}, r"adaptive.alpha"),
        ({"rounds": 3}, {}, r"unknown config key 'adaptive.rounds'"),
        (
            {},
            {"batch_size": {"auto": {"workers": 4}}},
            r"'benchmarks.standin.batch_size': auto sizes are not for .* rounds",
        ),
    ],
)
def test_bad_adaptive_settings_name_the_key_and_the_fix(tmp_path, adaptive, standin, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(sweep(tmp_path, adaptive, **standin))


def test_adaptive_needs_a_sweep(tmp_path):
    config = standin_config(tmp_path, adaptive={})
    with pytest.raises(ConfigError, match=r"'adaptive': only for a sweep of several policies"):
        validate_config(config)


def test_rounds_hold_their_batches_and_a_dropped_policy_stops_after_its_round(tmp_path):
    campaign = Campaign(validate_config(sweep(tmp_path, {"round_episodes": 10})))
    assert adaptive_benchmarks(campaign) == ["standin"] and round_count(campaign, "standin") == 2
    first = round_batches(campaign.member("a"), "standin", 0)
    assert {b.episodes.label for b in first} == {"0000-5", "0005-5"} and len(first) == 2 * 3  # 3 tasks
    assert rounds_evaluated(4, "b", lambda r: ["a", "b"] if r == 0 else ["a"]) == 2
    assert rounds_evaluated(4, "a", lambda r: ["a"]) == 4
    dropped = planned_batches(campaign, "standin", "b", lambda r: ["a"])
    assert {b.episodes.start for b in dropped} == {0, 5} and all("/b/standin/" in b.path for b in dropped)
    assert len(planned_batches(campaign, "standin", "a", lambda r: ["a"])) == 4 * 3
