"""The light core runs on the oldest interpreter a benchmark uses (Python 3.10, numpy 1.26): `make lint` runs
scripts/light_core.py --check there, and this proves that check passes on this checkout and fails, naming file and
line, on a copy into which 3.11-only modules, names and syntax were put."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from lightenv import light_core_script, py310_python

SCRIPT = REPO / "scripts" / "light_core.py"


def run_check(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(py310_python()), "--repo", str(repo)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_light_core_is_what_the_simulator_side_imports():
    core = light_core_script().light_core(REPO)
    # the entry point, every registered adapter, what they import lazily, and their packages' __init__
    for module in ("evalwf.job.sim_step", "benchmarks.robotwin.adapter", "benchmarks.robotwin.manifest_builder",
                   "benchmarks.libero.rng_states", "evalwf.plan.environment", "benchmarks.robotwin"):  # fmt: skip
        assert module in core
    for workflow_side in ("evalwf.rules.jobs", "evalwf.plan.campaign", "evalwf.worker.main"):
        assert workflow_side not in core
    listed = subprocess.run([sys.executable, str(SCRIPT), "--files"], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == [str(path.relative_to(REPO)) for path in core.values()]


def test_the_light_core_passes_on_python_310_with_numpy_126():
    done = run_check(REPO)
    assert done.returncode == 0, done.stderr
    assert "on Python 3.10." in done.stdout and "with numpy 1.26.4" in done.stdout


def test_3_11_only_modules_names_and_syntax_in_the_light_core_fail_the_check(tmp_path):
    copy = tmp_path / "checkout"
    for package in ("evalwf", "benchmarks"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    registry = copy / "benchmarks" / "registry.py"
    text = registry.read_text()
    registry.write_text(text.replace("import yaml\n", "import yaml\nfrom importlib.resources.abc import Traversable\n"))
    line = text[: text.index("import yaml\n")].count("\n") + 2
    seeds = copy / "evalwf" / "benchmark" / "seeds.py"
    with seeds.open("a") as handle:  # inside a function: importing the module would not notice
        handle.write("\n\ndef _later():\n    import tomllib\n    import datetime\n\n    return tomllib, datetime.UTC\n")
    first = seeds.read_text().splitlines().index("    import tomllib") + 1
    with (copy / "benchmarks" / "robotwin" / "standin_checkout" / "envs" / "click_bell.py").open("a") as handle:
        handle.write("\n\ndef _grouped():\n    try:\n        pass\n    except* ValueError:\n        pass\n")
    done = run_check(copy)
    assert done.returncode == 1
    problems = done.stderr
    assert f"registry.py:{line}: importlib.resources.abc.Traversable does not exist on Python 3.10" in problems
    assert "No module named 'importlib.resources.abc'" in problems and "evalwf.job.sim_step" in problems
    assert f"evalwf/benchmark/seeds.py:{first}: tomllib does not exist on Python 3.10" in problems
    assert f"evalwf/benchmark/seeds.py:{first + 3}: datetime.UTC does not exist on Python 3.10" in problems
    assert "envs/click_bell.py" in problems and "Cannot use `except*` on Python 3.10" in problems


def test_type_checking_imports_are_not_run_so_not_checked(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport datetime\nif TYPE_CHECKING:\n    from typing import Self\n"
        "def f():\n    return datetime.timezone.utc\n"
    )
    references = light_core_script().stdlib_references(source, frozenset(sys.stdlib_module_names))
    assert references == [(1, "typing", "TYPE_CHECKING"), (2, "datetime", None), (6, "datetime", "timezone")]


def test_the_py310_env_fails_saying_so_without_python_310_and_is_idempotent(tmp_path):
    setup = REPO / "scripts" / "setup_py310_env.sh"
    bin_dir = tmp_path / "bin"  # a PATH with the tools the script uses and no python at all
    bin_dir.mkdir()
    for tool in ("ls", "sort", "cat", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "no-pyenv")}
    missing = subprocess.run(
        ["/bin/bash", str(setup)], env={**env, "PY310_VENV": str(tmp_path / "venv")}, capture_output=True, text=True
    )
    assert missing.returncode == 1 and not (tmp_path / "venv").exists()
    assert "ERROR: no Python 3.10 found" in missing.stderr and "PY310=/path/to/python3.10" in missing.stderr
    wrong = subprocess.run(
        ["/bin/bash", str(setup)], env={**env, "PY310": sys.executable, "PY310_VENV": str(tmp_path / "venv")},
        capture_output=True, text=True,
    )  # fmt: skip
    assert wrong.returncode == 1 and f"PY310={sys.executable} is not a Python 3.10 interpreter" in wrong.stderr
    again = subprocess.run(["/bin/bash", str(setup)], env=env, capture_output=True, text=True)  # the built one
    assert again.returncode == 0 and "already holds numpy==1.26.4" in again.stdout, again.stderr
