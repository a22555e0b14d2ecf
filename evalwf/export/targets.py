"""Where a run's results are exported: the trackers of a config's `export:` block (evalwf/plan/config.schema.yaml
holds its keys and defaults) or of `evalwf export --to`, and whether each tracker's package is installed here.

A tracker is an optional extra (`[mlflow]`, `[wandb]`): a campaign whose `export:` names one that is not installed
is refused before any job runs, with the command that installs it, instead of failing after the last batch.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from evalwf.common.errors import ConfigError
from evalwf.common.json_types import JsonValue
from evalwf.common.paths import PROJECT_ROOT

# tracker -> the module its extra installs (mlflow-skinny and the full mlflow both provide `mlflow`)
TRACKER_MODULES = {"mlflow": "mlflow", "wandb": "wandb"}


class MlflowBlock(TypedDict):
    """`export.mlflow` as validation fills it."""

    tracking_uri: str | None
    experiment: str


class WandbBlock(TypedDict):
    """`export.wandb` as validation fills it."""

    project: str
    entity: str | None
    dir: str | None


def schema_default(tracker: str, key: str) -> str | None:
    """The default of `export.<tracker>.<key>` (the schema is the one place defaults are written)."""
    from evalwf.plan.config import config_schema

    schema = config_schema()["properties"]["export"]["properties"][tracker]["properties"][key]  # type: ignore[index]
    return schema["default"]  # type: ignore[index,return-value]


@dataclass(frozen=True)
class MlflowTarget:
    """An MLflow tracking store: a server (http://...), a local store (a path or file:// URI; sqlite:// needs the
    full `mlflow` package), or None: MLFLOW_TRACKING_URI, else <results_dir>/mlruns beside the runs."""

    tracking_uri: str | None
    experiment: str

    name = "mlflow"


@dataclass(frozen=True)
class WandbTarget:
    """A Weights & Biases project, written offline under `directory` (None: <results_dir>, W&B adds wandb/);
    `wandb sync` uploads it."""

    project: str
    entity: str | None
    directory: str | None

    name = "wandb"


ExportTarget = MlflowTarget | WandbTarget


def config_targets(document: Mapping[str, JsonValue]) -> list[ExportTarget]:
    """The trackers of a validated config document's `export:` block (none without one), in the block's order."""
    block = document.get("export") or {}
    assert isinstance(block, dict)
    targets: list[ExportTarget] = []
    for name, settings in block.items():
        assert isinstance(settings, dict)
        if name == "mlflow":
            mlflow: MlflowBlock = settings  # type: ignore[assignment]
            targets.append(MlflowTarget(mlflow["tracking_uri"], mlflow["experiment"]))
        elif name == "wandb":
            wandb: WandbBlock = settings  # type: ignore[assignment]
            targets.append(WandbTarget(wandb["project"], wandb["entity"], wandb["dir"]))
    return targets


def install_command(tracker: str) -> str:
    """The command that installs `tracker`'s extra into this environment, absolute so that it works as printed."""
    python = shlex.quote(os.path.abspath(sys.executable))
    if (PROJECT_ROOT / "pyproject.toml").is_file():  # a checkout: its pins
        root = Path(PROJECT_ROOT)
        return (
            f"{python} -m pip install -c {shlex.quote(str(root / 'constraints.txt'))} "
            f"-e {shlex.quote(f'{root}[{tracker}]')}"
        )
    return f"{python} -m pip install 'policy-eval-workflow[{tracker}]'"


def missing_tracker(tracker: str) -> str | None:
    """Why `tracker` cannot be exported to from this environment (its package is missing, with the install
    command); None when it can."""
    try:
        if importlib.util.find_spec(TRACKER_MODULES[tracker]) is not None:
            return None
    except (ImportError, ValueError):  # a broken install is no install
        pass
    return f"the {tracker} tracker is not installed in {sys.executable}'s environment; install it with: " + (
        install_command(tracker)
    )


def check_trackers_installed(targets: list[ExportTarget]) -> None:
    """Refuse (ConfigError naming `export.<tracker>` and the install command) a tracker that is not installed: a
    campaign checks it before any job runs."""
    for target in targets:
        reason = missing_tracker(target.name)
        if reason is not None:
            raise ConfigError(f"invalid config: config key 'export.{target.name}': {reason}")
