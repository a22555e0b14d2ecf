"""The validated campaign config is a frozen value read through what its attributes and methods name: no mapping a
reader could index as a dict, nothing a reader could change, and the document it hands out is the caller's copy."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import standin_config

from evalwf.plan.config import validate_config


def test_a_campaign_config_cannot_be_indexed_or_iterated_as_a_dict(tmp_path):
    config = validate_config(standin_config(tmp_path))
    with pytest.raises(TypeError):
        config["benchmarks"]  # type: ignore[index]
    with pytest.raises(TypeError):
        iter(config)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        dict(config)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        config["run"] = "other"  # type: ignore[index]


def test_a_campaign_config_cannot_be_changed(tmp_path):
    config = validate_config(standin_config(tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.run = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.benchmarks["other"] = config.benchmarks["standin"]  # type: ignore[index]
    assert config.run == "t" and list(config.benchmarks) == ["standin"]


def test_what_a_campaign_config_hands_out_is_a_copy(tmp_path):
    config = validate_config(standin_config(tmp_path))
    document = config.document()
    document["run"] = "other"
    document["benchmarks"]["standin"]["seed"] = 99
    document["reference"]["standin"] = {"alpha": 1.0}
    settings = config.section_settings("standin")
    settings["seed"] = 98
    assert config.document()["benchmarks"]["standin"]["seed"] == 0 == config.section_settings("standin")["seed"]
    assert config.document()["run"] == "t" and config.reference_block() == config.document()["reference"]
    assert config.reference_scores("standin") == {}
    assert validate_config(config) == config, "validating it again gives the same value"
