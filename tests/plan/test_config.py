"""Config validation: every invalid config fails with one message naming the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import REPO, standin_config

from evalwf.common.errors import ConfigError
from evalwf.plan.config import load_config, validate_config


@pytest.fixture
def valid(tmp_path):
    return standin_config(tmp_path)


def test_valid_config_gets_defaults(valid):
    document = validate_config(valid).document()
    section = document["benchmarks"]["standin"]
    assert section["seed"] == 0
    assert section["replan_steps"] == 5
    assert document["policy"]["protocol"] == "openpi-websocket"
    assert valid["benchmarks"]["standin"].get("seed") is None, "the caller's dict is not modified"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["benchmarks"]["standin"]["suites"].update(gamma="all"), "benchmarks.standin.suites.gamma"),
        (lambda c: c["benchmarks"]["standin"]["suites"].update(alpha=["fly"]), "unknown task(s) fly"),
        (lambda c: c["benchmarks"]["standin"].update(batch_size=0), "'benchmarks.standin.batch_size'"),
        (lambda c: c["benchmarks"]["standin"].update(batch_size=6), "larger than benchmarks.standin.episodes_per_task"),
        (lambda c: c["benchmarks"]["standin"].update(seed=-1), "'benchmarks.standin.seed'"),
        (lambda c: c["benchmarks"]["standin"].update(batch_sz=2), "unknown config key 'benchmarks.standin.batch_sz'"),
        (lambda c: c.update(colour="red"), "unknown config key 'colour'"),
        (lambda c: c["policy"].pop("command"), "give exactly one of 'policy.command' or 'policy.url' (given: none)"),
        (lambda c: c["policy"].update(url="ws://h:1"), "'policy.url' (given: command, url)"),
        (lambda c: c["policy"].update(url="http://h:1"), "config key 'policy"),
        (lambda c: c["benchmarks"].update(habitat={}), "unknown config key 'benchmarks.habitat'"),
        (lambda c: c.update(run="bad name"), "config key 'run'"),
    ],
)
def test_invalid_config_names_the_key(valid, mutate, expected):
    config = copy.deepcopy(valid)
    mutate(config)
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert expected in str(error.value)
    assert str(error.value).count("\n") == 0, "one message, one line"


def test_uneven_batches_are_allowed(valid):
    from evalwf.plan.campaign import Campaign

    valid["benchmarks"]["standin"].update(episodes_per_task=5, batch_size=2)
    plan = Campaign(validate_config(valid)).tasks[0]
    assert [(b.episodes.start, b.episodes.count) for b in plan.batches] == [(0, 2), (2, 2), (4, 1)]


@pytest.mark.parametrize(
    "names",
    [
        ["demo.yaml"],
        ["standin.yaml"],
        ["robotwin-standin.yaml"],
        ["libero.yaml", "policies/standin.yaml"],
        ["robotwin.yaml", "policies/standin.yaml"],
        ["libero.yaml", "robotwin.yaml", "policies/standin.yaml"],
        ["libero.yaml", "robotwin.yaml", "policies/openpi.yaml"],
    ],
    ids=" + ".join,
)
def test_shipped_configs_validate(names):
    config = load_config(*(REPO / "config" / name for name in names))
    assert config.run


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("python -m server --gpu {gpu}", "does not use {port}"),
        ("python -m server --port {prot}", "unknown placeholder {prot}"),
        ('python -m server --port {port} --args {"a": 1}', 'unknown placeholder {"a"}'),
        ("python -m server --port {port} --home ${HOME}", "unknown placeholder {HOME}"),
        ("python -m server --port {port} }", "Single '}'"),
    ],
)
def test_policy_command_template_is_checked_before_any_job(command, message):
    """These used to pass validation and fail every batch on every worker attempt (or wait out the startup
    timeout); now the config is refused with the key, the reason and how to write a literal brace."""
    config = standin_config(Path("/tmp"))
    config["policy"]["command"] = command
    with pytest.raises(ConfigError) as raised:
        validate_config(config)
    text = str(raised.value)
    assert "policy.command" in text and message in text
    if "placeholder" in message or "Single" in message:
        assert "{{" in text, "the message says how to write a literal brace"


def test_policy_command_with_escaped_braces_renders_literally():
    config = standin_config(Path("/tmp"))
    config["policy"]["command"] = 'serve --port {port} --args {{"a": 1}} --home ${{HOME}}'
    (spec,) = validate_config(config).policies
    assert spec.render_command(8000, "0") == 'serve --port 8000 --args {"a": 1} --home ${HOME}'


def test_yaml_syntax_error_and_missing_file_are_named(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text('run: t\npolicy: {name: p, command: "x {port}"\nbenchmarks: {}\n')
    with pytest.raises(ConfigError, match=r"broken.yaml, line 3, column 1: YAML syntax error"):
        load_config(broken)
    with pytest.raises(ConfigError, match=r"config file .*absent\.yaml does not exist"):
        load_config(tmp_path / "absent.yaml")


def test_gpu_placeholder_is_the_index_the_server_sees():
    """The worker runs the server under CUDA_VISIBLE_DEVICES=<its GPU>: there, `cuda:{gpu}` must be cuda:0 (the
    physical id 3 would name a device the server cannot see); {gpu_physical} keeps the id."""
    config = standin_config(Path("/tmp"))
    config["policy"]["command"] = "serve --port {port} --device cuda:{gpu} --label {gpu_physical}"
    (spec,) = validate_config(config).policies
    assert spec.render_command(9000, "3") == "serve --port 9000 --device cuda:0 --label 3"
    assert spec.render_command(9000, "") == "serve --port 9000 --device cuda:0 --label 0"
