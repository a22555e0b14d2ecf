"""Invariant 13: the environment is part of the episodes. Every manifest definition records the benchmark
interpreter's Python and the versions of the packages its adapter declares, and the checkout's identity, read
where the workflow is parsed (one probe per interpreter, nothing written), so that another environment is another
manifest name; a host that cannot read it plans but runs nothing; the simulator step refuses a manifest of another
environment."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_snakemake, write_config
from lightenv import py310_python

from benchmarks.robotwin.checkout import checkout_identity
from evalwf.benchmark.adapter import get_adapter
from evalwf.common.errors import ManifestError
from evalwf.common.package_versions import installed_versions
from evalwf.contract.sim_request import BatchRequest, ManifestRequest
from evalwf.job import sim_step
from evalwf.plan import environment
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config
from evalwf.plan.manifest import seal_manifest

ROBOTWIN = get_adapter("robotwin")
STANDIN_CHECKOUT = REPO / "benchmarks" / "robotwin" / "standin_checkout"


def robotwin_config(**section: Any) -> dict[str, Any]:
    config = yaml.safe_load((REPO / "config" / "robotwin-standin.yaml").read_text())
    config["benchmarks"]["robotwin"].update(tasks=["click_bell"], task_configs=["demo_clean"], **section)
    return config


def planned(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The definition and the name of the first manifest the config plans."""
    plan = Campaign(validate_config(config)).tasks[0]
    return plan.definition, plan.manifest_hash


def bare_python_310(where: Path) -> Path:
    """A Python 3.10 venv with nothing installed: the same Python as .venv-py310, without numpy."""
    base = subprocess.run(
        [str(py310_python()), "-c", "import sys; print(sys._base_executable)"], capture_output=True, text=True
    ).stdout.strip()
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def test_the_definition_records_python_package_versions_and_the_checkout_and_numpy_changes_the_name(tmp_path):
    python = str(py310_python())
    definition, name = planned(robotwin_config(python=python))
    assert definition["environment"] == {
        "python": definition["environment"]["python"],
        "packages": {"numpy": "1.26.4", "sapien": None, "mplib": None, "torch": None},  # absent: recorded so
        "checkout": checkout_identity(STANDIN_CHECKOUT),
    }
    assert definition["environment"]["python"].startswith("3.10.")
    assert definition["environment"]["checkout"].startswith("files-sha256:")  # the stand-in has no .git
    assert planned(robotwin_config(python=python)) == (definition, name)  # the same everywhere it is read
    # The same Python 3.10 without numpy: only numpy differs, and so does the name.
    bare, bare_name = planned(robotwin_config(python=str(bare_python_310(tmp_path / "bare"))))
    assert bare["environment"] == {**definition["environment"], "packages": dict.fromkeys(ROBOTWIN.episode_packages)}
    assert bare_name != name
    # In process: the workflow's interpreter, its numpy.
    inside, inside_name = planned(robotwin_config())
    assert inside["environment"]["packages"]["numpy"] == installed_versions(["numpy"])["numpy"] != "1.26.4"
    assert inside_name not in (name, bare_name)


def test_what_each_benchmark_declares(tmp_path):
    libero = {"libero": {"suites": {"libero_spatial": [0]}, "episodes_per_task": 2, "batch_size": 1}}
    standin = {"standin": {"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 1}}
    config = {"run": "t", "policy": {"name": "p", "command": "x --port {port}"}, "benchmarks": {**libero, **standin}}
    campaign = Campaign(validate_config(config))
    [libero_plan, standin_plan] = campaign.tasks
    packages = libero_plan.definition["environment"]["packages"]
    assert list(packages) == ["hf-libero", "robosuite", "mujoco", "numpy"]  # what its reset RNG states depend on
    assert packages == installed_versions(list(packages))
    assert "environment" not in standin_plan.definition  # the stand-in's episodes are this project's code alone


def test_one_probe_per_interpreter_for_every_benchmark_and_policy(monkeypatch):
    python = str(py310_python())
    calls = []
    run = subprocess.run

    def counted(command, *args, **kwargs):
        calls.append(command[0])
        return run(command, *args, **kwargs)

    monkeypatch.setattr(environment, "_PROBED", {})
    monkeypatch.setattr(environment.subprocess, "run", counted)
    config = robotwin_config(python=python)
    libero = {"suites": {"libero_spatial": [0, 1]}, "episodes_per_task": 2, "batch_size": 1, "python": python}
    config["benchmarks"]["libero"] = libero
    config.pop("policy")
    config["policies"] = [{"name": n, "command": "x --port {port}", "checkpoint": n} for n in ("a", "b")]
    campaign = Campaign(validate_config(config))
    assert calls == [python]  # both benchmarks, the campaign and its two members: one subprocess
    libero = campaign.task_plan("libero", "libero_spatial", "0").definition["environment"]
    assert libero["packages"] == {"hf-libero": None, "robosuite": None, "mujoco": None, "numpy": "1.26.4"}


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def test_the_checkout_is_named_by_its_git_commit_read_from_git_itself(tmp_path):
    repo = tmp_path / "RoboTwin"
    shutil.copytree(STANDIN_CHECKOUT, repo, ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert checkout_identity(repo) == f"git:{head}"
    _git(repo, "pack-refs", "--all")  # the branch now only in packed-refs
    assert not list((repo / ".git" / "refs" / "heads").iterdir()) and checkout_identity(repo) == f"git:{head}"
    _git(repo, "checkout", "-q", "--detach")
    assert checkout_identity(repo) == f"git:{head}"
    worktree = tmp_path / "worktree"  # .git is a file there, its branch's ref in the main repository
    _git(repo, "worktree", "add", "-q", "-b", "other", str(worktree))
    (worktree / "envs" / "click_bell.py").write_text("# changed\n")
    _git(worktree, "commit", "-q", "-am", "two")
    assert checkout_identity(worktree) == f"git:{_git(worktree, 'rev-parse', 'HEAD')}" != f"git:{head}"


def test_without_git_the_checkout_is_named_by_its_code(tmp_path):
    copy = tmp_path / "standin"
    shutil.copytree(STANDIN_CHECKOUT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = checkout_identity(copy)
    assert base == checkout_identity(STANDIN_CHECKOUT)  # where it lies does not matter
    (copy / "envs" / "__pycache__").mkdir()
    (copy / "envs" / "__pycache__" / "x.cpython-310.pyc").write_bytes(b"\0")
    (copy / "assets" / "objects").mkdir()
    (copy / "assets" / "objects" / "bell.glb").write_bytes(b"data, not code")
    assert checkout_identity(copy) == base
    with (copy / "task_config" / "demo_clean.yml").open("a") as handle:
        handle.write("# edited\n")
    assert checkout_identity(copy) != base


def test_without_its_environment_a_campaign_plans_and_dry_runs_but_runs_nothing(tmp_path):
    config = robotwin_config(python=str(tmp_path / "no-such-env"))
    config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
    configfile = str(write_config(tmp_path / "c.yaml", config))
    dry = run_snakemake(tmp_path, "-n", "--configfile", configfile)
    assert "NOTE: robotwin planned without its environment" in dry.stderr
    assert f"config key 'benchmarks.robotwin.python' = '{tmp_path / 'no-such-env'}'" in dry.stderr
    real = run_snakemake(tmp_path, "--cores", "1", "--configfile", configfile, check=False)
    assert real.returncode != 0
    output = real.stdout + real.stderr
    assert "benchmark robotwin cannot run from this host: config key 'benchmarks.robotwin.python'" in output
    assert "host that submits the campaign needs them" in output
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()  # no job ran


def _files(*roots: Path) -> set[Path]:
    return {path for root in roots for path in root.rglob("*")}


def test_a_dry_run_probes_the_interpreter_and_writes_nothing(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = robotwin_config(python=str(py310_python()))
    config.update(results_dir=str(workdir / "results"), manifest_cache=str(tmp_path / "cache"))
    configfile = write_config(tmp_path / "c.yaml", config)
    venv = py310_python().parent.parent
    before = _files(venv, STANDIN_CHECKOUT)
    dry = run_snakemake(workdir, "-n", "--configfile", str(configfile))
    assert "plan_manifest" in dry.stdout and "NOTE" not in dry.stderr
    assert {p.relative_to(workdir).parts[0] for p in _files(workdir)} <= {".snakemake"}
    assert not (tmp_path / "cache").exists() and _files(venv, STANDIN_CHECKOUT) == before


def test_the_simulator_step_refuses_a_manifest_of_another_environment(tmp_path):
    config = robotwin_config(episodes_per_task=2)
    plan = Campaign(validate_config(config)).tasks[0]
    section = validate_config(config).section_settings("robotwin")
    other = {**plan.definition["environment"], "packages": {**plan.definition["environment"]["packages"]}}
    other["packages"]["numpy"] = "1.0.0"
    definition = {**plan.definition, "environment": other}
    request = ManifestRequest(benchmark="robotwin", definition=definition, scope="demo_clean", task="click_bell",
                              section=section, output=str(tmp_path / "m.json"))  # fmt: skip
    here = installed_versions(["numpy"])["numpy"]
    with pytest.raises(ManifestError, match=rf"planned for another environment .*numpy 1\.0\.0 there, {here} here"):
        sim_step.run_request(request)
    assert not (tmp_path / "m.json").exists()
    # A manifest sealed for that environment (by hand here) is refused by a batch in this one.
    seal_manifest(ROBOTWIN, definition, "demo_clean", "click_bell", tmp_path / "m.json")
    from evalwf.plan.manifest import manifest_hash

    batch = BatchRequest(run="t", benchmark="robotwin", suite="demo_clean-unseen", task="click_bell",
                         episode_start=0, episode_count=1, section=section, manifest_path=str(tmp_path / "m.json"),
                         manifest_hash=manifest_hash(definition), endpoint="ws://127.0.0.1:9", infer_timeout_s=30.0,
                         policy_identity="p", output=str(tmp_path / "b.json"),
                         artifacts_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(ManifestError, match=r"numpy 1\.0\.0 there"):
        sim_step.run_request(batch)
    assert not (tmp_path / "b.json").exists()


def test_a_job_step_on_a_host_with_another_environment_names_what_differs(tmp_path):
    """The submitter planned (and a worker built) the manifest in RoboTwin's Python 3.10; a job step on a host whose
    interpreter at that path is another one plans another manifest name: it fails saying what differs."""
    import sys

    from conftest import SNAKEFILE

    from evalwf.rules import jobs

    def campaign_with(python: str | None) -> tuple[Campaign, Path]:
        config = robotwin_config(python=python, instruction_types=["unseen"], episodes_per_task=2, batch_size=2)
        config.update(results_dir=str(tmp_path / "results"), manifest_cache=str(tmp_path / "cache"))
        return Campaign(validate_config(config)), write_config(tmp_path / f"{bool(python)}.yaml", config)

    planned_with, _ = campaign_with(str(py310_python()))
    [manifest] = planned_with.manifests()
    jobs.seal_task_manifest(
        planned_with, *planned_with.manifests()[manifest].manifest_key, manifest
    )  # as the worker that ran the manifest job did
    here, configfile = campaign_with(None)  # this host: the workflow's interpreter at that path
    [batch] = here.batches()
    wildcards = (
        f"run=robotwin-standin,benchmark=robotwin,suite=demo_clean-unseen,task=click_bell,batch={batch.episodes.label}"
    )
    step = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--mode", "remote",
         "--target-jobs", f"evaluate_batch:{wildcards}", "--allowed-rules", "evaluate_batch", "--cores", "1",
         "--force", "--nolock", "--configfiles", str(configfile)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert step.returncode != 0
    output = step.stdout + step.stderr
    assert "robotwin on this host is not the environment the campaign was planned with" in output
    assert f"{manifest} was planned for " in output and "numpy 1.26.4 there" in output
    assert not Path(batch.path).exists()


def test_status_refuses_a_run_whose_environment_it_cannot_read(tmp_path):
    from evalwf.report import run_state

    run_dir = tmp_path / "results" / "robotwin-standin"
    run_dir.mkdir(parents=True)
    config = robotwin_config(python=str(tmp_path / "gone"))
    snapshot = {**validate_config(config).document(), "policy_identity": "p"}
    (run_dir / "campaign.yaml").write_text(yaml.safe_dump(snapshot))
    with pytest.raises(SystemExit, match=r"robotwin's environment cannot be read here .*benchmarks\.robotwin\.python"):
        run_state.load_run(run_dir, tmp_path)


def test_an_interpreter_that_cannot_report_its_versions_makes_the_environment_unavailable(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'libpython3.10.so: cannot open shared object file' >&2\nexit 127\n")
    broken.chmod(0o755)
    campaign = Campaign(validate_config(robotwin_config(python=str(broken))))
    reason = campaign.environment_unavailable("robotwin")
    assert reason is not None and f"config key 'benchmarks.robotwin.python': {broken} could not report" in reason
    assert "(exit status 127): libpython3.10.so: cannot open shared object file" in reason
