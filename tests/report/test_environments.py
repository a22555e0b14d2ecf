"""The environment every batch records, as status, the report and compare show it: on copies of the session's
finished stand-in run whose batch files are edited to say they ran elsewhere."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml

from evalwf.report import compare, status
from evalwf.report.aggregate import summarize_benchmark
from evalwf.report.environments import BatchRef, environment_lines
from evalwf.report.landing import landing_html
from evalwf.report.run_state import load_run

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_driver": "550.54.15", "cuda_version": "12.4"}


def copied_run(finished, destination: Path) -> tuple[Path, Path]:
    """A copy of the finished run (results and manifest cache) at `destination`, its snapshot pointing there:
    (workdir, run_dir)."""
    for part in ("results", "cache"):
        shutil.copytree(finished.workdir / part, destination / part)
    run_dir = destination / "results" / finished.config["run"]
    snapshot = yaml.safe_load((run_dir / "campaign.yaml").read_text())
    snapshot.update(results_dir=str(destination / "results"), manifest_cache=str(destination / "cache"))
    (run_dir / "campaign.yaml").write_text(yaml.safe_dump(snapshot, sort_keys=False))
    return destination, run_dir


def edit_batches(run_dir: Path, pattern: str, change) -> list[Path]:
    """Apply `change` to the parsed JSON of every batch file matching `pattern` (under standin/batches)."""
    paths = sorted((run_dir / "standin" / "batches").glob(pattern))
    assert paths, pattern
    for path in paths:
        result = json.loads(path.read_text())
        change(result)
        path.write_text(json.dumps(result))
    return paths


def test_a_real_batch_records_the_environment_it_ran_in(finished_standin_run):
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name"))
    batches = sorted((finished_standin_run.benchmark_dir / "batches").rglob("*.json"))
    assert len(batches) == 6
    for path in batches:
        record = json.loads(path.read_text())["environment"]
        assert record["python"] == sys.version.split()[0]  # the stand-in runs in the workflow's interpreter
        assert record["packages"] == {}  # the stand-in declares no episode packages (as its manifests record none)
        assert record["cpu_model"] == model
        assert record["renderer"] == "stand-in: numpy-drawn frames (no GL or Vulkan)"
        if shutil.which("nvidia-smi") is None:  # nothing invented where nothing can be read: null, and why
            assert record["gpu_model"] is None and "nvidia-smi" in record["why_null"]["gpu_model"]
            assert record["cuda_version"] is None and record["why_null"]["cuda_version"]
        else:
            assert record["gpu_model"] and record["gpu_driver"]
        assert set(record["why_null"]) == {key for key, value in record.items() if value is None}


def test_batches_under_two_environments_are_flagged_in_status_and_report(finished_standin_run, tmp_path, capsys):
    workdir, run_dir = copied_run(finished_standin_run, tmp_path / "two")
    edit_batches(run_dir, "alpha/push/*.json", lambda result: result["environment"].update(H100))
    edit_batches(run_dir, "beta/open/0003-2.json", lambda result: result.pop("environment"))

    assert status.main([str(run_dir), "--workdir", str(workdir)]) == 0
    shown = capsys.readouterr().out
    assert "WARNING: batches ran under 3 environments (they differ in gpu_model, gpu_driver, cuda_version)" in shown
    lines = shown.splitlines()
    h100 = next(line for line in lines if "NVIDIA H100 80GB HBM3" in line)
    assert "2 batch(es): standin alpha/push (all 2)" in h100
    assert "gpu_driver 550.54.15, cuda_version 12.4" in h100
    here = next(line for line in lines if "3 batch(es)" in line)
    assert "standin alpha/reach (all 2), standin beta/open 0000-3" in here
    old = "not recorded (written before batches recorded their environment): 1 batch(es): standin beta/open 0003-2"
    assert old in shown

    landing = landing_html(load_run(run_dir, workdir))  # the report's first page: the caveat under the table
    assert '<pre class="evalwf-environments">WARNING: batches ran under 3 environments' in landing

    campaign = load_run(run_dir, workdir).single()
    outputs = {"tasks": tmp_path / "t.csv", "suites": tmp_path / "s.csv", "markdown": tmp_path / "summary.md"}
    summarize_benchmark(campaign, "standin", {key: str(path) for key, path in outputs.items()}, echo=True)
    markdown = outputs["markdown"].read_text()
    assert "## Environment" in markdown
    assert "batches ran under 3 environments" in markdown and "standin alpha/push (all 2)" in markdown
    assert "batches ran under 3 environments" in capsys.readouterr().err  # the gather step's terminal


def test_one_environment_is_one_line_and_old_files_say_not_recorded(finished_standin_run, tmp_path, capsys):
    workdir, run_dir = copied_run(finished_standin_run, tmp_path / "old")
    status.main([str(run_dir), "--workdir", str(workdir)])
    assert "environment: every batch ran under one: python " in capsys.readouterr().out
    assert "evalwf-environments" not in landing_html(load_run(run_dir, workdir))  # no caveat to show

    edit_batches(run_dir, "*/*/*.json", lambda result: result.pop("environment"))
    assert status.main([str(run_dir), "--workdir", str(workdir)]) == 0  # still readable, still complete
    shown = capsys.readouterr().out
    assert "environment: not recorded (every batch was written before batches recorded it)" in shown
    assert "WARNING" not in shown


def test_compare_warns_naming_the_fields_that_differ(finished_standin_run, tmp_path, capsys):
    _, run_a = copied_run(finished_standin_run, tmp_path / "a")
    _, run_b = copied_run(finished_standin_run, tmp_path / "b")
    assert compare.main([str(run_a), str(run_a)]) == 0
    assert "WARNING" not in capsys.readouterr().out  # one run against itself: the same environment

    def elsewhere(result):
        result["environment"].update(H100, renderer="NVIDIA H100/PCIe/SSE2 (OpenGL 4.6.0, MUJOCO_GL=egl)")
        result["environment"]["packages"]["mujoco"] = "3.3.0"

    edit_batches(run_b, "*/*/*.json", elsewhere)
    assert compare.main([str(run_a), str(run_b), "--out", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().out
    assert "WARNING: the runs' environments differ in gpu_model, gpu_driver, cuda_version, renderer, " in shown
    gpu_a = json.loads(next(run_a.rglob("batches/*/*/*.json")).read_text())["environment"]["gpu_model"] or "null"
    assert f"  gpu_model: A {gpu_a}; B NVIDIA H100 80GB HBM3" in shown
    assert "  packages.mujoco: A absent; B 3.3.0" in shown
    assert "packages.mujoco: A absent; B 3.3.0" in (tmp_path / "out" / "comparison.md").read_text()

    edit_batches(run_a, "alpha/*/*.json", lambda result: result.pop("environment"))
    compare.main([str(run_a), str(run_b)])
    assert "environment not recorded for some batches of A (written before" in capsys.readouterr().out


def test_many_tasks_under_one_environment_are_listed_compactly():
    def record(mujoco: str) -> dict:
        unread = {"gpu_model": None, "gpu_driver": None, "cuda_version": None}
        packages = {"mujoco": mujoco, "robosuite": "1.4.1"}
        return {"python": "3.11.7", "packages": packages, "cpu_model": "x", **unread, "renderer": "r", "why_null": {}}

    batches = {
        BatchRef("libero", "libero_10", str(task), label): record("3.2.3")
        for task in range(9)
        for label in ("0000-5", "0005-5")
    }
    batches[BatchRef("libero", "libero_10", "9", "0000-5")] = record("3.3.0")
    lines = environment_lines(batches)
    assert lines[0].startswith("WARNING: batches ran under 2 environments (they differ in packages.mujoco)")
    assert lines[1] == (
        "  [1] mujoco 3.2.3: 18 batch(es): libero libero_10/0 (all 2), libero libero_10/1 (all 2), "
        "libero libero_10/2 (all 2), libero libero_10/3 (all 2), libero libero_10/4 (all 2), "
        "libero libero_10/5 (all 2), ... and 3 more task(s)"
    )
    assert lines[2] == "  [2] mujoco 3.3.0: 1 batch(es): libero libero_10/9 (all 1)"
