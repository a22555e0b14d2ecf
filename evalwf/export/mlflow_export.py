"""TrackerRuns into MLflow: one MLflow run per (policy, benchmark) in a named experiment, found again by its tag
`evalwf.key` (the TrackerRun's digest), so a re-export updates it instead of adding a run.

MLflow never changes a logged parameter: when a re-export's parameters differ from the run's (the campaign grew,
another config), the old MLflow run is deleted (MLflow's trash) and a new one with the same tag takes its place.
A metric is logged again only when its value changed, so a re-export adds no history points.

Nothing reaches the network but the tracking server named: MLflow's telemetry is turned off before MLflow is
imported (MLFLOW_DISABLE_TELEMETRY, unless set). A local path is MLflow's file store (MLflow keeps it in
maintenance mode and refuses it unless MLFLOW_ALLOW_FILE_STORE is set, which this module sets for a local path); a
sqlite:/// store works as well (SQLAlchemy and Alembic come with labtasker-server), its artifacts beside it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from evalwf.export.run_record import ExportError, TrackerRun
from evalwf.export.targets import MlflowTarget

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

KEY_TAG = "evalwf.key"
MAX_PARAM_VALUE = 6000  # MLflow's limit on a parameter's value (characters)
MAX_PER_BATCH = 100  # MLflow's log_batch takes at most 100 parameters (1000 metrics, 100 tags) per call
DEFAULT_STORE = "mlruns"  # beside the runs: <results_dir>/mlruns
T = TypeVar("T")


@dataclass(frozen=True)
class MlflowRun:
    """Where one TrackerRun went: its MLflow run id and whether it was created, updated or replaced."""

    name: str
    run_id: str
    action: str
    tracking_uri: str
    experiment: str


def tracking_uri(target: MlflowTarget, results_dir: Path) -> str:
    """The store to write: the target's, else MLFLOW_TRACKING_URI, else <results_dir>/mlruns; a path (absolute,
    or relative to the working directory) becomes a file:// URI."""
    uri = target.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or str(results_dir / DEFAULT_STORE)
    if "://" in uri or uri.startswith(("file:", "databricks")):
        return uri
    return Path(uri).resolve().as_uri()


def artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a sqlite store's database file (MLflow's default is
    ./mlruns of whatever the working directory is); None (the store's own) for every other store."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri.removeprefix("sqlite:///")).resolve()  # a relative one: from the working directory
    return (database.parent / "mlartifacts").as_uri()


def _import_client(uri: str) -> type[MlflowClient]:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient


def _chunks(items: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _param_value(value: str) -> str:
    """A value MLflow stores: longer ones cut, saying so (the whole config is the run's campaign.yaml artifact)."""
    marker = " ...(cut: see the campaign.yaml artifact)"
    return value if len(value) <= MAX_PARAM_VALUE else value[: MAX_PARAM_VALUE - len(marker)] + marker


def export_to_mlflow(runs: list[TrackerRun], target: MlflowTarget, results_dir: Path) -> list[MlflowRun]:
    """Write every TrackerRun into `target`'s experiment (created if missing, restored if deleted)."""
    uri = tracking_uri(target, results_dir)
    client_class = _import_client(uri)
    from mlflow.entities import Metric, Param, RunTag, ViewType
    from mlflow.exceptions import MlflowException

    try:
        client = client_class(tracking_uri=uri)
        experiment = client.get_experiment_by_name(target.experiment)
        if experiment is None:
            experiment_id = client.create_experiment(target.experiment, artifact_location=artifact_location(uri))
        else:
            experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":
                client.restore_experiment(experiment_id)
        written = []
        for run in runs:
            found = client.search_runs(
                [experiment_id], f"tags.`{KEY_TAG}` = '{run.digest}'", run_view_type=ViewType.ACTIVE_ONLY
            )
            params = {key: _param_value(value) for key, value in run.params.items()}
            existing = found[0] if found else None
            action = "updated"
            if existing is not None and any(existing.data.params.get(k, v) != v for k, v in params.items()):
                client.delete_run(existing.info.run_id)
                existing, action = None, "replaced"
            if existing is None:
                existing = client.create_run(experiment_id, run_name=run.name, tags={KEY_TAG: run.digest})
                action = "created" if action != "replaced" else action
            run_id = existing.info.run_id
            now = int(time.time() * 1000)
            new_params = [Param(k, v) for k, v in params.items() if k not in existing.data.params]
            metrics = [Metric(k, v, now, 0) for k, v in run.metrics.items() if existing.data.metrics.get(k) != v]
            tags = {
                KEY_TAG: run.digest,
                "evalwf.export_key": run.key,
                "evalwf.run": run.run,
                "evalwf.policy": run.policy,
                "evalwf.policy_identity": run.policy_identity,
                "evalwf.benchmark": run.benchmark,
                "evalwf.status": run.status,
            }
            changed_tags = [RunTag(k, v) for k, v in tags.items() if existing.data.tags.get(k) != v]
            for chunk in _chunks(new_params, MAX_PER_BATCH):
                client.log_batch(run_id, params=chunk)
            for metric_chunk in _chunks(metrics, 1000):
                client.log_batch(run_id, metrics=metric_chunk)
            if changed_tags:
                client.log_batch(run_id, tags=changed_tags)
            for folder, path in run.artifacts:
                client.log_artifact(run_id, str(path), folder)
            client.set_terminated(run_id, "FINISHED")
            written.append(MlflowRun(run.name, run_id, action, uri, target.experiment))
        return written
    except MlflowException as error:
        raise ExportError(f"MLflow at {uri} (experiment {target.experiment!r}): {error.message}") from None
