"""The session's finished stand-in run exported for real: into a local MLflow store, read back with MLflow's own
client, and into W&B offline files, read back with W&B's own record format; exported twice, without duplicates.
Nothing reaches the network: MLflow writes a local file store, W&B is offline, telemetry is off."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest

from evalwf.export.mlflow_export import KEY_TAG
from evalwf.export.run_record import tracker_runs
from evalwf.export.targets import MlflowTarget, WandbTarget
from evalwf.export.to_trackers import export_run
from evalwf.export.wandb_export import offline_dirs


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Offline, and W&B's own folders (artifact staging, cache, settings) in the test's."""
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def run_dir(finished_standin_run) -> Path:
    return finished_standin_run.benchmark_dir.parent


def test_mlflow_export_reads_back_and_a_second_export_updates_the_same_run(finished_standin_run, tmp_path):
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlruns"
    target = MlflowTarget(str(store), "evalwf-test")
    first = export_run(run_dir(finished_standin_run), [target])
    assert [(e.tracker, e.name, e.action) for e in first] == [("mlflow", "t/standin-policy/standin", "created")]

    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("evalwf-test")
    (run,) = client.search_runs([experiment.experiment_id])
    snapshot = (finished_standin_run.benchmark_dir.parent / "campaign.yaml").read_text()
    params, metrics = run.data.params, run.data.metrics
    assert params["policy_identity"] in snapshot and params["benchmark"] == "standin"
    assert params["config.episodes_per_task"] == "5" and json.loads(params["config.suites.alpha"]) == ["reach", "push"]
    batch = json.loads(
        next((finished_standin_run.benchmark_dir / "batches" / "alpha" / "reach").glob("*.json")).read_text()
    )
    assert params["manifest_hash.alpha.reach"] == batch["manifest_hash"]
    assert params["batches.hosts"] == batch["worker"]["host"] and params["batches.python"] == batch["worker"]["python"]
    # what the sealed manifests share: the simulator (a benchmark's protocol), the base seed; not a task's name
    assert params["manifest.simulator"] == "standin-v1" and params["manifest.base_seed"] == "0"
    assert "manifest.task" not in params

    tasks = pd.read_csv(finished_standin_run.benchmark_dir / "task_summary.csv", dtype={"task": str})
    for row in tasks.itertuples():
        assert metrics[f"task/{row.suite}/{row.task}/success_rate"] == pytest.approx(row.success_rate, abs=1e-4)
        assert metrics[f"task/{row.suite}/{row.task}/ci95_high"] == pytest.approx(row.ci95_high, abs=1e-4)
        assert metrics[f"task/{row.suite}/{row.task}/episodes"] == 5
    assert {"suite/alpha/success_rate", "suite/beta/ci95_low", "suite/average/episodes"} <= set(metrics)
    summary = {f.path for f in client.list_artifacts(run.info.run_id, "summary")}
    assert {"summary/task_summary.csv", "summary/success_by_task.png", "summary/summary.html"} <= summary
    assert "run/campaign.yaml" in {f.path for f in client.list_artifacts(run.info.run_id, "run")}

    second = export_run(run_dir(finished_standin_run), [target])
    assert [(e.run_id, e.action) for e in second] == [(run.info.run_id, "updated")]
    (again,) = client.search_runs([experiment.experiment_id], f"tags.`{KEY_TAG}` != ''")
    assert again.info.run_id == run.info.run_id
    assert len(client.get_metric_history(run.info.run_id, "task/alpha/reach/success_rate")) == 1


def wandb_records(path: Path) -> list[object]:
    """The records of a W&B offline run file, read with W&B's own protobuf definitions: a 7-byte header, then
    LevelDB-log blocks of 32 KiB holding (crc32, length, type) headed chunks."""
    from wandb.proto import wandb_internal_pb2

    data, records, pending, index = path.read_bytes(), [], b"", 7
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    while index + 7 <= len(data):
        if 32768 - index % 32768 < 7:  # a block's tail too short for a chunk header is padding
            index += 32768 - index % 32768
            continue
        length, kind = struct.unpack("<HB", data[index + 4 : index + 7])
        chunk, index = data[index + 7 : index + 7 + length], index + 7 + length
        pending += chunk
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_offline_export_names_the_run_and_a_second_export_replaces_its_files(finished_standin_run, tmp_path):
    target = WandbTarget("evalwf-test", None, str(tmp_path))
    (first,) = export_run(run_dir(finished_standin_run), [target])
    (second,) = export_run(run_dir(finished_standin_run), [target])
    assert first.run_id == second.run_id and first.run_id.startswith("evalwf-")
    (folder,) = offline_dirs(tmp_path, second.run_id)  # the first export's folder is gone: one run to sync
    assert str(folder) == second.where
    records = wandb_records(folder / f"run-{second.run_id}.wandb")
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert runs and runs[0].run_id == second.run_id and runs[0].display_name == "t/standin-policy/standin"
    assert runs[0].project == "evalwf-test"
    summary = {
        item.key or "/".join(item.nested_key): json.loads(item.value_json)
        for record in records
        if record.WhichOneof("record_type") == "summary"
        for item in record.summary.update
    }
    (expected,) = tracker_runs(run_dir(finished_standin_run))
    assert summary["task/alpha/reach/success_rate"] == pytest.approx(expected.metrics["task/alpha/reach/success_rate"])
    config = {item.key: json.loads(item.value_json) for item in runs[0].config.update}
    assert config["policy_identity"] == expected.params["policy_identity"]
    assert config["manifest_hash.alpha.reach"] == expected.params["manifest_hash.alpha.reach"]
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert {"summary/task_summary.csv", "run/campaign.yaml"} <= {c.path for c in artifacts[0].manifest.contents}


def test_a_reexport_whose_parameters_changed_replaces_the_mlflow_run(finished_standin_run, tmp_path):
    """MLflow never changes a logged parameter: the run whose config changed is replaced, not doubled."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    target = MlflowTarget(str(tmp_path / "mlruns"), "evalwf-test")
    copy = tmp_path / "results" / "t"
    shutil.copytree(run_dir(finished_standin_run), copy)
    (first,) = export_run(copy, [target])
    snapshot = copy / "campaign.yaml"
    snapshot.write_text(snapshot.read_text().replace("max_steps: 15", "max_steps: 16"))
    (second,) = export_run(copy, [target])
    assert second.action == "replaced" and second.run_id != first.run_id
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("evalwf-test").experiment_id
    (active,) = client.search_runs([experiment])
    assert active.info.run_id == second.run_id and active.data.params["config.max_steps"] == "16"
    deleted = client.search_runs([experiment], run_view_type=ViewType.DELETED_ONLY)
    assert [run.info.run_id for run in deleted] == [first.run_id]


def test_an_mlflow_sqlite_store_keeps_one_run_and_its_artifacts_beside_it(finished_standin_run, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for _ in range(2):
        export_run(run_dir(finished_standin_run), [MlflowTarget(uri, "evalwf-test")])
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("evalwf-test").experiment_id])
    assert "summary/task_summary.csv" in {f.path for f in client.list_artifacts(run.info.run_id, "summary")}
    assert list((tmp_path / "mlartifacts").rglob("task_summary.csv"))
