"""The installed `evalwf` console script: its help, every subcommand's help, --version, and the `python -m`
forms it delegates to, each run as a real subprocess."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

EVALWF = Path(sys.executable).with_name("evalwf")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=REPO)


def test_console_script_is_installed_and_lists_every_subcommand():
    assert EVALWF.exists(), "reinstall the package: .venv/bin/pip install -e . --no-deps"
    completed = run(str(EVALWF), "--help")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("usage: evalwf")
    for command in ("plan", "status", "worker", "compare", "export", "demo", "policy", "benchmark"):
        assert re.search(rf"^    {command}\s", completed.stdout, re.MULTILINE), command  # a long name wraps


def test_version_is_the_installed_distribution_version():
    from importlib import metadata

    completed = run(str(EVALWF), "--version")
    assert completed.returncode == 0
    assert completed.stdout.strip() == f"evalwf {metadata.version('policy-eval-workflow')}"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("plan", ["usage: evalwf plan", "--configfile FILE", "--workers N", "auto plans for, else 4", "conservative"]),
        ("status", ["usage: evalwf status", "run_dir", "--watch"]),
        ("worker", ["usage:", "--gpus", "--slots", "--idle-timeout"]),
        ("demo", ["usage: evalwf demo", "make demo"]),
        ("compare", ["usage: evalwf compare", "run_a", "run_b", "--out"]),
        ("export", ["usage: evalwf export", "run", "--to {mlflow,wandb}", "--tracking-uri", "--wandb-dir"]),
        ("policy", ["usage: evalwf policy check", "--configfile"]),
        ("policy check", ["usage:", "--configfile", "--repeat"]),
        ("benchmark", ["usage: evalwf benchmark", "list", "show", "check"]),
        ("benchmark list", ["usage: evalwf benchmark list"]),
        ("benchmark show", ["usage: evalwf benchmark show", "NAME"]),
        ("benchmark check", ["usage: evalwf benchmark check", "--configfile FILE", "(default: [])", "NAME"]),
    ],
)
def test_every_subcommand_has_help(command, expected):
    completed = run(str(EVALWF), *command.split(), "--help")
    assert completed.returncode == 0, completed.stderr
    for text in expected:
        assert text in completed.stdout, f"{text!r} missing from `evalwf {command} --help`:\n{completed.stdout}"


@pytest.mark.parametrize(
    "module", ["evalwf.report.status", "evalwf.worker.main", "evalwf.cli.main", "evalwf.cli.benchmark"]
)
def test_python_m_forms_still_work(module):
    completed = run(sys.executable, "-m", module, "--help")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("usage:")


def test_plan_rejects_a_bad_config_with_the_key_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "config" / "standin.yaml").read_text().replace("batch_size: 2", "batch_size: 0"))
    completed = run(str(EVALWF), "plan", "--configfile", str(bad))
    assert completed.returncode == 2
    assert "benchmarks.standin.batch_size" in completed.stderr


def test_every_runnable_module_is_a_subcommand_or_says_it_is_internal():
    """A module of evalwf/ with a __main__ is either what an `evalwf <subcommand>` runs (its docstring shows that
    command) or says it is internal: a user never has to guess which `python -m` forms are theirs."""
    import ast

    from conftest import REPO

    from evalwf.cli.main import DELEGATED, POLICY_COMMANDS

    targets = {module: f"evalwf policy {name}" for name, module in POLICY_COMMANDS.items()}
    for name, (run, _) in DELEGATED.items():
        module = next((c.cell_contents for c in (run.__closure__ or ()) if isinstance(c.cell_contents, str)), None)
        if module:
            targets[module] = f"evalwf {name}"
    unmarked = []
    for path in sorted((REPO / "evalwf").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if '__name__ == "__main__"' not in text or path.name == "__main__.py":
            continue
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        doc = ast.get_docstring(ast.parse(text)) or ""
        expected = targets.get(module)
        if module == "evalwf.cli.main":
            continue
        if not (expected and expected in doc) and "internal" not in doc.lower():
            unmarked.append(f"{module}: docstring shows neither {expected or 'an evalwf subcommand'} nor 'internal'")
    assert not unmarked, "\n".join(unmarked)
