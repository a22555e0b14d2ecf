"""TrackerRuns into Weights & Biases, offline: one W&B run per (policy, benchmark) under <directory>/wandb/, with
the deterministic id `evalwf-<digest>` (resume="allow"), so `wandb sync` uploads every export of it into the same
W&B run. Parameters go to the run's config, metrics to its summary (a re-export overwrites them, adding no history
points), the summary files to one artifact.

Offline is the only mode here: nothing is sent, the user syncs (`wandb sync <directory>/wandb/offline-run-*`). A
re-export removes the earlier offline folder of the same run id, so a sync uploads the latest export only. W&B's
error reporting is off (WANDB_ERROR_REPORTING, unless set), and so are system metrics, git and code capture.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from evalwf.export.run_record import ExportError, TrackerRun
from evalwf.export.targets import WandbTarget


@dataclass(frozen=True)
class WandbRun:
    """Where one TrackerRun went: its W&B run id and the offline folder `wandb sync` uploads."""

    name: str
    run_id: str
    offline_dir: Path


def wandb_run_id(run: TrackerRun) -> str:
    return f"evalwf-{run.digest}"


def offline_dirs(directory: Path, run_id: str) -> list[Path]:
    """The offline folders W&B wrote for `run_id` under `directory` (offline-run-<time>-<id>), oldest first."""
    return sorted((directory / "wandb").glob(f"offline-run-*-{run_id}"))


def export_to_wandb(runs: list[TrackerRun], target: WandbTarget, results_dir: Path) -> list[WandbRun]:
    """Write every TrackerRun offline under the target's directory (default: the results directory)."""
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    import wandb

    directory = Path(target.directory or results_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(
        mode="offline", silent=True, x_disable_stats=True, save_code=False, disable_git=True, console="off"
    )
    written = []
    try:
        for run in runs:
            run_id = wandb_run_id(run)
            for earlier in offline_dirs(directory, run_id):
                shutil.rmtree(earlier)
            tracker = wandb.init(
                project=target.project,
                entity=target.entity,
                id=run_id,
                name=run.name,
                group=run.run,
                job_type="evaluation",
                tags=[run.benchmark, run.policy, run.status],
                resume="allow",
                dir=str(directory),
                config=run.params,
                settings=settings,
            )
            try:
                tracker.summary.update({**run.metrics, "status": run.status})
                artifact = wandb.Artifact(f"evalwf-{run.digest}", type="evaluation")
                for folder, path in run.artifacts:
                    artifact.add_file(str(path), name=f"{folder}/{path.name}")
                tracker.log_artifact(artifact)
            finally:
                tracker.finish()
            written.append(WandbRun(run.name, run_id, offline_dirs(directory, run_id)[-1]))
    except (wandb.Error, OSError) as error:
        raise ExportError(f"W&B offline export under {directory}: {error}") from None
    finally:
        wandb.teardown()  # its service process ends with the export, not with the process that called it
    return written
