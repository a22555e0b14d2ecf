"""Installable: the wheel carries the schemas, the stand-in RoboTwin checkout, the workflow and the shipped
configs; installed into a fresh virtual environment (no checkout on its path) it plans a campaign."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """A wheel built from this checkout, installed (--no-deps, offline) into a fresh venv whose only other
    packages are the pinned dependencies of the workflow's environment (its site-packages, through a .pth)."""
    root = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(REPO)], cwd=root)
    [wheel] = (root / "dist").glob("policy_eval_workflow-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip()
    )
    # The dependencies only: a path added by a .pth is not a site directory, so the workflow environment's own
    # editable install of this checkout (a .pth there) is not processed.
    (site / "workflow_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        cwd=root,
    )
    return wheel, python


def test_wheel_carries_the_package_data(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "evalwf/plan/config.schema.yaml",
        "evalwf/plan/batch_result.schema.json",
        "benchmarks/standin/schema.yaml",
        "benchmarks/libero/schema.yaml",
        "benchmarks/robotwin/schema.yaml",
        "benchmarks/robotwin/standin_checkout/task_config/demo_clean.yml",
        "benchmarks/robotwin/standin_checkout/envs/_base_task.py",
        "evalwf/workflow/Snakefile",
        "evalwf/workflow/rules/common.smk",
        "evalwf/config/standin.yaml",
        "evalwf/config/policies/standin.yaml",  # policy files, composed with the benchmark files
        "evalwf/profiles/labtasker/config.yaml",
        "evalwf/contract/__init__.py",  # shared by the plugin and the workers
        "evalwf/queue/embedded_server.py",
        "snakemake_executor_plugin_labtasker/__init__.py",
    ):
        assert expected in names, expected
    assert not [n for n in names if "__pycache__" in n or n.startswith("evalwf/workflow/.snakemake")]


def test_installed_wheel_plans_a_shipped_config(installed, tmp_path):
    _, python = installed
    probe = (
        "import benchmarks, evalwf.common.paths as p\n"
        "from evalwf.plan.campaign import Campaign\n"
        "from evalwf.plan.config import load_config\n"
        "import evalwf.queue.embedded_server, snakemake_executor_plugin_labtasker\n"
        "print(benchmarks.__file__)\n"
        "plan = Campaign(load_config(p.shipped('config') / 'robotwin-standin.yaml')).tasks[0]\n"
        "print(plan.definition['task_config_sha256'])\n"  # the stand-in checkout, found in the installed package
        "print(p.snakefile())\n"
    )
    module_file, checkout_hash, snakefile = _run([str(python), "-c", probe], tmp_path).stdout.split()
    site = str(python.parent.parent)
    assert module_file.startswith(site) and snakefile.startswith(site), "the installed package, not the checkout"
    assert checkout_hash != "None"
    config = Path(snakefile).parents[1] / "config" / "standin.yaml"
    done = _run([str(python), "-m", "snakemake", "-n", "-s", snakefile, "--configfile", str(config)], tmp_path)
    assert "evaluate_batch" in done.stdout and "This was a dry-run" in done.stdout
