"""`evalwf export` as a user types it: the tracker runs it wrote, one line each; without a tracker, or on a folder
that is no run, what to give instead. `evalwf plan` refuses an export to a tracker that is not installed."""

from __future__ import annotations

from conftest import missing_facts, standin_config, write_config

from evalwf.cli.main import main
from evalwf.export import targets


def test_export_prints_each_tracker_run_and_says_what_is_missing(finished_standin_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    run = str(finished_standin_run.benchmark_dir.parent)
    store = tmp_path / "mlruns"
    assert main(["export", run, "--to", "mlflow", "--tracking-uri", str(store), "--experiment", "lab"]) == 0
    line = capsys.readouterr().out
    assert not missing_facts(line, "mlflow: created t/standin-policy/standin", store.as_uri(), "experiment lab"), line
    assert main(["export", run]) == 2  # the run's config has no export: block
    assert not missing_facts(capsys.readouterr().err, "names no tracker", "--to mlflow", "--to wandb")
    assert main(["export", str(tmp_path), "--to", "mlflow"]) == 1
    assert not missing_facts(capsys.readouterr().err, f"{tmp_path}/campaign.yaml not found", "results/<run>")


def test_plan_refuses_an_export_to_a_tracker_not_installed(tmp_path, capsys, monkeypatch):
    """`evalwf plan` refuses what the workflow refuses: the tracker and the command that installs it."""
    configfile = write_config(tmp_path / "c.yaml", standin_config(tmp_path, export={"mlflow": {}}))
    assert main(["plan", "--configfile", str(configfile)]) == 0
    capsys.readouterr()
    monkeypatch.setitem(targets.TRACKER_MODULES, "mlflow", "mlflow_is_not_installed_here")
    assert main(["plan", "--configfile", str(configfile)]) == 2
    message = capsys.readouterr().err
    assert not missing_facts(message, "evalwf plan:", "config key 'export.mlflow'", "not installed", "[mlflow]")
