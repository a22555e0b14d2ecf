"""`evalwf export` as a user types it: the tracker runs it wrote, one line each; without a tracker, or on a folder
that is no run, what to give instead."""

from __future__ import annotations

from conftest import missing_facts

from evalwf.cli.main import main


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
