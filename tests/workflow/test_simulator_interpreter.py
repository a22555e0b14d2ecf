"""Invariant 9: a benchmark's manifests and batches run in the interpreter its section names
(`benchmarks.<name>.python`): here the oldest one a benchmark uses, RoboTwin's Python 3.10 with numpy 1.26, a real
virtualenv without Snakemake, Labtasker or pandas (tests/lightenv.py), with the same outcomes as in process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from conftest import REPO, run_snakemake, standin_config, write_config
from lightenv import light_core_script, py310_python

from evalwf.common.errors import SimulatorEnvError
from evalwf.common.paths import PROJECT_ROOT
from evalwf.plan.interpreter import child_env, resolve_interpreter

PROFILE = ["--profile", str(REPO / "profiles" / "local")]


def test_the_simulator_entry_point_needs_only_the_light_core(tmp_path):
    """In a real Python 3.10 venv without them: the entry point and every adapter import, and none of the
    workflow-only packages is importable there (so nothing could have imported it by accident)."""
    script = light_core_script()
    roots = [script.ENTRY_MODULE, script.NODE_CHECKS_MODULE, *script.registered_adapters(REPO)]
    heavy = list(script.WORKFLOW_ONLY)
    code = (
        "import importlib, importlib.util, sys\n"
        f"for name in {roots!r}: importlib.import_module(name)\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r})\n"
        f"present = [m for m in {heavy!r} if importlib.util.find_spec(m)]\n"
        "print('loaded', loaded, 'present', present, sys.version_info[:2])\n"
    )
    python = py310_python()
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=child_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded [] present [] (3, 10)"
    usage = subprocess.run(
        [python, "-m", "evalwf.job.sim_step", "--help"], capture_output=True, text=True, env=child_env()
    )
    assert usage.returncode == 0 and "--request" in usage.stdout


def test_interpreter_is_a_python_or_an_environment_prefix(tmp_path):
    python = py310_python()
    assert resolve_interpreter(None, "libero") is None
    assert resolve_interpreter(str(python), "libero") == str(python)
    assert resolve_interpreter(str(python.parent.parent), "libero") == str(python)  # a prefix
    relative = os.path.relpath(python, PROJECT_ROOT)  # relative paths: against the project root
    assert resolve_interpreter(relative, "libero") == str(PROJECT_ROOT / relative)
    with pytest.raises(SimulatorEnvError, match=r"benchmarks\.libero\.python.*does not exist.*setup_libero\.sh"):
        resolve_interpreter(".venv-nowhere/bin/python", "libero")
    with pytest.raises(SimulatorEnvError, match=r"benchmarks\.robotwin\.python.*without bin/python.*setup_robotwin"):
        resolve_interpreter(str(tmp_path), "robotwin")


HOOKS = Path(__file__).parent / "hooks"  # sitecustomize: Python's `random` seeded where EVALWF_TEST_SEED_RANDOM is


def _campaign(workdir: Path, python: str | None, cache: Path) -> dict[str, Any]:
    """config/robotwin-standin.yaml cut to its clutter-drift task (1 task x 4 suites, 2 manifests; 2 episodes in one
    batch each: 4 batches) plus a small stand-in section, both run by `python` (None: in process), every process
    with Python's `random` seeded the same (the hook above); what it wrote, by benchmark."""
    workdir.mkdir()
    config = yaml.safe_load((REPO / "config" / "robotwin-standin.yaml").read_text())
    config["benchmarks"]["robotwin"].update(python=python, tasks=["dump_bin_bigbin"], episodes_per_task=2, batch_size=2)
    config["benchmarks"]["standin"] = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2,
                                       "max_steps": 30, "python": python}  # fmt: skip
    config.update(results_dir=str(workdir / "results"), manifest_cache=str(cache))
    env = {"PYTHONPATH": str(HOOKS), "EVALWF_TEST_SEED_RANDOM": "7"}
    configfile = str(write_config(workdir / "c.yaml", config))
    run_snakemake(workdir, "--cores", "2", "--configfile", configfile, env=env, timeout=900)
    found: dict[str, Any] = {}
    for benchmark in ("robotwin", "standin"):
        root = workdir / "results" / "robotwin-standin" / benchmark
        found[benchmark] = {
            "root": root,
            "batches": [json.loads(p.read_text()) for p in sorted((root / "batches").rglob("*.json"))],
            "manifests": {p.name: json.loads(p.read_text()) for p in sorted((root / "manifests").rglob("*.json"))},
            "logs": "".join(p.read_text() for p in sorted((root / "logs").rglob("*.log"))),
        }
    return found


def _episodes(batches: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Every per-episode record but the time it took."""
    return {
        (batch["suite"], batch["task"], record["index"]): {k: v for k, v in record.items() if k != "duration_s"}
        for batch in batches
        for record in batch["episodes"]
    }


def _check_robotwin_summaries(root: Path, batches: list[dict[str, Any]]) -> None:
    tasks = pd.read_csv(root / "task_summary.csv")
    assert len(tasks) == 4  # 1 task x 2 task configs x 2 instruction types
    assert set(tasks.task_config) == {"demo_clean", "demo_randomized"}
    assert set(tasks.instruction_type) == {"seen", "unseen"}
    assert (tasks.episodes == 2).all() and (tasks.status == "complete").all()
    summary = pd.read_csv(root / "benchmark_summary.csv")
    per_suite = summary[summary.task_config != "average"]
    assert len(per_suite) == 4 and per_suite.episodes.sum() == 8
    assert per_suite.successes.sum() == tasks.successes.sum()
    # seen and unseen share one manifest per task config: the same env seeds, each with its own text
    episodes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for batch in batches:
        episodes.setdefault((batch["suite"], batch["task"]), []).extend(batch["episodes"])
    for task in ("dump_bin_bigbin",):
        seen = sorted(episodes[("demo_clean-seen", task)], key=lambda r: r["index"])
        unseen = sorted(episodes[("demo_clean-unseen", task)], key=lambda r: r["index"])
        assert [r["setup"] for r in seen] == [r["setup"] for r in unseen]
        assert [r["extra"]["instruction"] for r in seen] == [r["setup"]["instruction_seen"] for r in seen]
        assert [r["extra"]["instruction"] for r in unseen] == [r["setup"]["instruction_unseen"] for r in unseen]


@pytest.mark.slow  # two campaigns of 5 batches and 3 manifests, each batch with its own policy server: ~1 min
def test_campaign_through_python_310_and_numpy_126_gives_the_in_process_records(tmp_path):
    """The RoboTwin stand-in campaign (and a stand-in benchmark) with every manifest and batch in RoboTwin's
    interpreter version, then in the workflow's own: the same per-episode records. The environment is part of
    the episodes: the RoboTwin manifests of the two runs record their own Python and numpy, so they have other
    names and neither reuses the other's (one manifest cache); each run found the same seeds and, with Python's
    `random` seeded alike, drew the same texts. The stand-in declares no environment and shares its manifest."""
    python = str(py310_python())
    cache = tmp_path / "cache"
    outside = _campaign(tmp_path / "py310", python, cache)
    inside = _campaign(tmp_path / "in-process", None, cache)
    for benchmark, jobs in (("robotwin", 2 + 4), ("standin", 1 + 1)):
        assert {b["worker"]["python"] for b in outside[benchmark]["batches"]} == {python}
        assert python not in {b["worker"]["python"] for b in inside[benchmark]["batches"]}
        assert outside[benchmark]["logs"].count(f"in {python}") == jobs  # every manifest and batch job
        assert f"in {python}" not in inside[benchmark]["logs"]
        assert _episodes(outside[benchmark]["batches"]) == _episodes(inside[benchmark]["batches"])
    assert outside["standin"]["manifests"] == inside["standin"]["manifests"]  # one manifest, from the cache

    old, new = outside["robotwin"]["manifests"], inside["robotwin"]["manifests"]
    assert len(old) == len(new) == 2 and not set(old) & set(new)  # other environments, other names
    for manifest in old.values():
        assert manifest["definition"]["environment"]["python"].startswith("3.10.")
        assert manifest["definition"]["environment"]["packages"]["numpy"] == "1.26.4"
    for manifest in new.values():
        assert not manifest["definition"]["environment"]["python"].startswith("3.10.")
        assert manifest["definition"]["environment"]["packages"]["numpy"] != "1.26.4"
    assert {(m["scope"], m["task"]): m["episodes"] for m in old.values()} == {
        (m["scope"], m["task"]): m["episodes"] for m in new.values()
    }
    _check_robotwin_summaries(outside["robotwin"]["root"], outside["robotwin"]["batches"])


def test_a_missing_interpreter_fails_the_job_naming_the_key(tmp_path):
    config = standin_config(tmp_path, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 1, "batch_size": 1})
    config["benchmarks"]["standin"]["python"] = "/nonexistent/env"
    failed = run_snakemake(
        tmp_path, *PROFILE, "--configfile", str(write_config(tmp_path / "c.yaml", config)), check=False
    )
    assert failed.returncode != 0
    assert "config key 'benchmarks.standin.python' = '/nonexistent/env'" in failed.stdout + failed.stderr
