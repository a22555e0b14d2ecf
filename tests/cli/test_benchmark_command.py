"""`evalwf benchmark list|show|check`: the registry's benchmarks, their settings as the schema gives them, and a
check of each benchmark on this node (its interpreter, the job code, the adapter's own checks) that says OK or
what is wrong and how to fix it."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from conftest import REPO

from benchmarks import registry
from evalwf.cli.benchmark import main
from evalwf.plan.config import config_schema

LIBERO_PYTHON = REPO / ".venv-libero" / "bin" / "python"


def evalwf_benchmark(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_names_every_registered_benchmark_with_its_package_schema_and_tasks(capsys):
    code, out, _ = evalwf_benchmark(capsys, "list")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1 : 1 + len(registry.names())]}
    assert set(rows) == set(registry.names())
    for name, row in rows.items():
        assert row[1] == registry.package(name)
        assert row[2] == f"benchmarks/{name}/schema.yaml" and (REPO / row[2]).is_file()
        assert row[3] == "null"  # no benchmark's schema names an interpreter: configs do
    assert rows["standin"][4:] == ["2", "7"]  # benchmarks/standin/sim.py: alpha (4 tasks) and beta (3)
    assert rows["libero"][4:] == ["5", "130"]  # spatial, object, goal, 10 (10 tasks each) and 90
    assert rows["robotwin"][4:] == ["4", "200"]  # 2 task configs x 2 instruction types, 50 tasks each


@pytest.mark.parametrize("name", registry.names())
def test_show_gives_every_setting_with_the_schemas_type_and_default(capsys, name):
    code, out, _ = evalwf_benchmark(capsys, "show", name)
    assert code == 0
    assert f"benchmarks/{name}/schema.yaml" in out
    properties = config_schema()["$defs"][name]["properties"]
    for key, sub in properties.items():
        [line] = [line for line in out.splitlines() if line.startswith(f"  {key}: ")]
        if "default" in sub:
            assert f", default {json.dumps(sub['default'])}" in line, line
    assert "episodes_per_task: integer, required" in out  # a common key without a default
    assert "  batch_size: integer | mapping, required" in out  # a shared definition, no top-level key of that name
    # keys outside the settings digest that the batch paths carry: changing them evaluates episodes again (LIBERO's
    # schema declares both itself, inside its digest, so the line says nothing of reruns)
    for key in ("episodes_per_task", "batch_size"):
        [line] = [line for line in out.splitlines() if line.startswith(f"  {key}: ")]
        assert "reruns nothing" not in line, line
        assert ("evaluated again" in line) == (name != "libero"), line


def test_show_reads_the_defaults_from_the_schema_alone(capsys):
    schema = yaml.safe_load((REPO / "benchmarks" / "standin" / "schema.yaml").read_text())
    _, out, _ = evalwf_benchmark(capsys, "show", "standin")
    assert f"  max_steps: integer, default {schema['properties']['max_steps']['default']}" in out
    assert '  record_video: one of none, failures, all, default "none"; changing it reruns nothing' in out


def test_check_standin_runs_the_probe_in_the_workflows_interpreter(capsys):
    code, out, err = evalwf_benchmark(capsys, "check", "standin", "--configfile", str(REPO / "config" / "standin.yaml"))
    assert code == 0, err
    assert f"interpreter  OK   {sys.executable}" in out and "null: the workflow's own interpreter" in out
    assert "standin: OK" in out and "evalwf.job.sim_step and benchmarks.standin.adapter import" in out


def test_check_names_a_missing_interpreter_and_the_fix(capsys, tmp_path):
    missing = tmp_path / "no-such-env" / "bin" / "python"
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({"benchmarks": {"standin": {"python": str(missing)}}}))
    code, out, err = evalwf_benchmark(
        capsys, "check", "standin", "--configfile", str(REPO / "config" / "standin.yaml"), str(override)
    )
    assert code == 1
    assert "standin: FAILED" in err and "interpreter  FAIL config key 'benchmarks.standin.python'" in out
    assert f"{missing} does not exist" in out
    assert "fix: point benchmarks.standin.python at an existing python executable" in out
    assert "standin: OK" not in out


def test_check_reports_an_interpreter_that_cannot_import_the_benchmark(capsys, tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named numpy' >&2\nexit 1\n")
    broken.chmod(0o755)
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({"benchmarks": {"standin": {"python": str(broken)}}}))
    code, out, _ = evalwf_benchmark(
        capsys, "check", "standin", "--configfile", str(REPO / "config" / "standin.yaml"), str(override)
    )
    assert code == 1
    assert f"light core   FAIL {broken} cannot import evalwf.job.sim_step and benchmarks.standin.adapter" in out
    assert "No module named numpy" in out and "fix: that environment needs Python >= 3.10" in out


def test_check_robotwin_without_a_checkout_says_which_key_to_set(capsys):
    code, out, _ = evalwf_benchmark(capsys, "check", "robotwin")
    assert code == 1
    assert "checkout     FAIL benchmarks.robotwin.robotwin_root is not set" in out
    assert "fix: set it to the checkout; rerun scripts/setup_robotwin.sh" in out
    code, out, err = evalwf_benchmark(
        capsys, "check", "robotwin", "--configfile", str(REPO / "config" / "robotwin-standin.yaml")
    )
    assert code == 0, err
    assert "robotwin: OK" in out


def test_check_a_benchmark_the_config_does_not_configure_is_a_config_error(capsys):
    code, _, err = evalwf_benchmark(capsys, "check", "libero", "--configfile", str(REPO / "config" / "standin.yaml"))
    assert code == 2
    assert "no benchmarks.libero section" in err


@pytest.mark.skipif(not LIBERO_PYTHON.exists(), reason="no .venv-libero (scripts/setup_libero.sh)")
def test_check_libero_runs_the_probe_in_the_simulators_own_interpreter(capsys):
    code, out, err = evalwf_benchmark(capsys, "check", "libero", "--configfile", str(REPO / "config" / "libero.yaml"))
    assert code == 0, err
    assert "libero     interpreter  OK" in out and ".venv-libero/bin/python" in out and "libero: OK" in out
    assert "libero     renderer     OK   one 64x48 frame rendered (MUJOCO_GL=egl)" in out
