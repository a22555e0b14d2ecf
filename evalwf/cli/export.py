"""`evalwf export RUN --to mlflow|wandb`: a finished run's results into an experiment tracker, one tracker run per
(policy, benchmark): the config, manifest hashes, protocol and environment as parameters, success rates, Wilson
bounds and episode counts per suite and task as metrics, the summary tables, plot and report as artifacts.
Exporting again updates the same tracker runs. Without --to, the trackers of the run's `export:` block.

W&B is written offline (nothing is sent); upload with `wandb sync DIR/wandb/offline-run-*`. docs/trackers.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalwf.export.run_record import ExportError, load_run_campaign
from evalwf.export.targets import ExportTarget, MlflowTarget, WandbTarget, config_targets, schema_default
from evalwf.export.to_trackers import export_run


def _targets(args: argparse.Namespace) -> list[ExportTarget]:
    if not args.to:  # the run's own export: block
        return config_targets(load_run_campaign(args.run).config.document())
    targets: list[ExportTarget] = []
    for tracker in dict.fromkeys(args.to):
        if tracker == "mlflow":
            targets.append(MlflowTarget(args.tracking_uri, args.experiment))
        else:
            targets.append(WandbTarget(args.project, args.entity, args.wandb_dir))
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run folder, results/<run>")
    parser.add_argument(
        "--to", action="append", choices=["mlflow", "wandb"], help="a tracker (repeat for both); default: the run's"
    )
    parser.add_argument(
        "--tracking-uri",
        help="MLflow store: a server URL or a local path; default MLFLOW_TRACKING_URI, else <results_dir>/mlruns",
    )
    parser.add_argument(
        "--experiment", default=schema_default("mlflow", "experiment"), help="MLflow experiment (created if missing)"
    )
    parser.add_argument("--project", default=schema_default("wandb", "project"), help="W&B project")
    parser.add_argument("--entity", help="W&B entity (team or user); default: the account's own, at sync")
    parser.add_argument(
        "--wandb-dir", help="where W&B writes its offline runs (under DIR/wandb/); default: <results_dir>"
    )
    args = parser.parse_args(argv)
    try:
        targets = _targets(args)
        if not targets:
            print(
                f"evalwf export: {args.run} names no tracker (no export: block): give --to mlflow or --to wandb",
                file=sys.stderr,
            )
            return 2
        for exported in export_run(args.run, targets):
            print(exported.line())
    except ExportError as error:
        print(f"evalwf export: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
