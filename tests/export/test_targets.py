"""The `export:` config block (validated by the schema, defaults from it), the trackers it names, and a tracker that
is not installed, named with the command that installs it."""

from __future__ import annotations

import pytest
from conftest import REPO, missing_facts, standin_config

from evalwf.common.errors import ConfigError
from evalwf.export import targets
from evalwf.export.targets import MlflowTarget, WandbTarget, check_trackers_installed, config_targets
from evalwf.plan.config import validate_config


def test_an_export_block_takes_the_schema_defaults(tmp_path):
    config = validate_config(standin_config(tmp_path, export={"wandb": {"project": "lab"}, "mlflow": {}}))
    assert config_targets(config.document()) == [
        WandbTarget(project="lab", entity=None, directory=None),
        MlflowTarget(tracking_uri=None, experiment="evalwf"),
    ]
    assert config_targets(validate_config(standin_config(tmp_path)).document()) == []


@pytest.mark.parametrize(
    ("export", "facts"),
    [
        ({"neptune": {}}, ["unknown config key 'export.neptune'", "mlflow, wandb"]),
        ({}, ["config key 'export'", "non-empty"]),
        ({"mlflow": None}, ["config key 'export.mlflow'", "not of type 'object'"]),
        ({"mlflow": {"uri": "x"}}, ["unknown config key 'export.mlflow.uri'", "experiment, tracking_uri"]),
        ({"wandb": {"project": "a/b"}}, ["config key 'export.wandb.project'", "'a/b'"]),
    ],
)
def test_a_wrong_export_block_is_named(tmp_path, export, facts):
    with pytest.raises(ConfigError) as error:
        validate_config(standin_config(tmp_path, export=export))
    assert not missing_facts(str(error.value), *facts), str(error.value)


def test_a_tracker_not_installed_is_named_with_its_install_command(monkeypatch):
    check_trackers_installed([MlflowTarget(None, "evalwf"), WandbTarget("evalwf", None, None)])  # both installed
    monkeypatch.setitem(targets.TRACKER_MODULES, "wandb", "wandb_is_not_installed_here")
    with pytest.raises(ConfigError) as error:
        check_trackers_installed([MlflowTarget(None, "evalwf"), WandbTarget("evalwf", None, None)])
    facts = ["config key 'export.wandb'", "not installed", f"-c {REPO}/constraints.txt", f"-e '{REPO}[wandb]'"]
    assert not missing_facts(str(error.value), *facts), str(error.value)
