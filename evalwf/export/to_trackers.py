"""Export a run folder to each tracker named: what `evalwf export` and the workflow's export rule call. Every tracker
is checked to be installed before anything is read or written."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from evalwf.common.atomic import atomic_write_text
from evalwf.common.errors import ConfigError
from evalwf.export.run_record import ExportError, tracker_runs
from evalwf.export.targets import ExportTarget, MlflowTarget, WandbTarget, check_trackers_installed


@dataclass(frozen=True)
class Exported:
    """One tracker run written: which tracker, its name and id there, and where to find it."""

    tracker: str
    name: str
    run_id: str
    where: str
    action: str  # created, updated, replaced (MLflow); written (W&B offline)

    def line(self) -> str:
        return f"{self.tracker}: {self.action} {self.name} (run {self.run_id}) in {self.where}"


def export_run(run_dir: Path, targets: list[ExportTarget]) -> list[Exported]:
    """Every (policy, benchmark) of the run into every target; ExportError naming the cause when one cannot be."""
    try:
        check_trackers_installed(targets)
    except ConfigError as error:
        raise ExportError(str(error).removeprefix("invalid config: ")) from None
    runs = tracker_runs(run_dir)
    results_dir = run_dir.resolve().parent
    exported: list[Exported] = []
    for target in targets:
        if isinstance(target, MlflowTarget):
            from evalwf.export.mlflow_export import export_to_mlflow

            exported += [
                Exported("mlflow", r.name, r.run_id, f"{r.tracking_uri} (experiment {r.experiment})", r.action)
                for r in export_to_mlflow(runs, target, results_dir)
            ]
        elif isinstance(target, WandbTarget):
            from evalwf.export.wandb_export import export_to_wandb

            exported += [
                Exported("wandb", r.name, r.run_id, str(r.offline_dir), "written")
                for r in export_to_wandb(runs, target, results_dir)
            ]
    return exported


def write_export_record(output: str, exported: list[Exported]) -> None:
    """What an export wrote, for the workflow's export rule (its output) and a person looking for the runs."""
    document = {
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": [asdict(e) for e in exported],
    }
    atomic_write_text(output, json.dumps(document, indent=1) + "\n")
