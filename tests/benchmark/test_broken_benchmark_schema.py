"""A registered benchmark whose schema.yaml has a YAML syntax error is refused naming its file, line and column; the
other benchmarks still list, validate and plan (one broken file must not take every benchmark down)."""

from __future__ import annotations

import re
import sys

import pytest
from conftest import standin_config

from benchmarks import registry
from evalwf.cli.benchmark import main
from evalwf.common.errors import ConfigError
from evalwf.plan import config as config_module
from evalwf.plan.campaign import Campaign

# line 4, column 12: the flow mapping of line 3 is never closed
BROKEN_SCHEMA = "type: object\nproperties:\n  suites: {type: object\n  max_steps: {type: integer}\n"


@pytest.fixture
def broken_benchmark(tmp_path, monkeypatch):
    """A benchmark `broken` registered beside the real ones, laid out as they are (its adapter reads the settings
    class its settings.py makes of its schema.yaml): the stand-in's adapter, a schema.yaml that is not YAML."""
    package = tmp_path / "brokenbench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(
        "from evalwf.benchmark.settings import settings_class\n\n"
        "BrokenSettings = settings_class('BrokenSettings', __name__)\n"
    )
    (package / "adapter.py").write_text(
        "from benchmarks.standin.adapter import Adapter as StandinAdapter\n"
        "from brokenbench.settings import BrokenSettings\n\n\n"
        "class Adapter(StandinAdapter):\n    settings_class = BrokenSettings\n"
    )
    (package / "schema.yaml").write_text(BROKEN_SCHEMA)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.BENCHMARKS, "broken", "brokenbench")
    _forget_schemas()
    yield package / "schema.yaml"
    monkeypatch.undo()
    _forget_schemas()


def _forget_schemas() -> None:
    """Drop what was read of the registry (this test's package lives in its own tmp_path)."""
    config_module.config_schema.cache_clear()
    for module in [name for name in sys.modules if name.split(".")[0] == "brokenbench"]:
        del sys.modules[module]
    registry._ADAPTERS.pop(("broken", "brokenbench"), None)


def test_the_list_names_the_broken_file_line_and_column_and_still_lists_the_others(broken_benchmark, capsys):
    code = main(["list"])
    out, err = capsys.readouterr()
    assert code == 1
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1 : 1 + len(registry.names())]}
    assert set(rows) == set(registry.names())
    assert rows["standin"][2:] == ["benchmarks/standin/schema.yaml", "null", "2", "7"]
    assert rows["libero"][3:] == ["null", "5", "130"] and rows["robotwin"][3:] == ["null", "4", "200"]
    assert rows["broken"][3] == "?"
    assert f"{broken_benchmark}, line 4, column 12: YAML syntax error" in err
    assert "<unicode string>" not in err and "Traceback" not in out + err


def test_a_config_of_the_broken_benchmark_is_refused_naming_its_file_and_the_others_still_plan(
    broken_benchmark, tmp_path
):
    campaign = Campaign(config_module.validate_config(standin_config(tmp_path)))
    assert campaign.batches() and {plan.ref.benchmark for plan in campaign.batches()} == {"standin"}
    config = standin_config(tmp_path)
    config["benchmarks"]["broken"] = {"episodes_per_task": 1, "batch_size": 1, "suites": {"alpha": "all"}}
    with pytest.raises(ConfigError) as refused:
        config_module.validate_config(config)
    message = str(refused.value)
    assert "'benchmarks.broken'" in message and f"{broken_benchmark}, line 4, column 12" in message
    assert main(["show", "broken"]) == 2


def test_a_schema_that_is_yaml_but_no_json_schema_is_refused_naming_the_key(broken_benchmark, capsys):
    broken_benchmark.write_text("type: object\nproperties:\n  max_steps:\n    type: integer {\n")
    _forget_schemas()
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert f"its schema {broken_benchmark}: key 'properties.max_steps.type' is not valid JSON schema" in err
    with pytest.raises(ConfigError, match=r"'benchmarks\.broken'.*key 'properties\.max_steps\.type'"):
        config_module.validate_config(
            {**standin_config(broken_benchmark.parent), "benchmarks": {"broken": {"episodes_per_task": 1}}}
        )


def test_the_settings_class_of_a_broken_schema_is_refused_naming_its_file(broken_benchmark):
    with pytest.raises(registry.BrokenSchema, match=rf"{re.escape(str(broken_benchmark))}, line 4, column 12"):
        registry.adapter("broken")
