"""A campaign with an `export:` block, run by a real snakemake: it ends by exporting to every tracker named (the
tracker runs found in the stores afterwards), and a tracker that is not installed is refused before any job runs,
with the command that installs it."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, SNAKEFILE, frames_shown, missing_facts, run_snakemake, standin_config, write_config
from runkit import fabricate_run


def test_a_tracker_not_installed_is_named_with_its_install_command_before_any_job(tmp_path):
    """snakemake as its console script runs it, in an interpreter where `mlflow` cannot be imported."""
    config = standin_config(tmp_path, export={"mlflow": {}})
    configfile = write_config(tmp_path / "c.yaml", config)
    hide = "import sys; sys.modules['mlflow'] = None; from snakemake.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", hide, "--snakefile", str(SNAKEFILE), "-n", "--configfile", str(configfile)]
    completed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = completed.stdout + completed.stderr
    assert completed.returncode != 0
    assert not missing_facts(output, "export.mlflow", "not installed", "pip install", f"{REPO}[mlflow]"), output
    assert not frames_shown(output), output[-3000:]
    assert not (tmp_path / "results").exists()


def test_a_campaign_ends_by_exporting_to_each_tracker_named(tmp_path):
    """The batches are fabricated (evaluated before); the run summarises and exports them."""
    export = {"mlflow": {"tracking_uri": str(tmp_path / "mlruns")}, "wandb": {"dir": str(tmp_path / "wb")}}
    campaign = fabricate_run(tmp_path, lambda suite, task, index: index % 2 == 0, export=export)
    configfile = write_config(tmp_path / "c.yaml", campaign.config.document())
    env = {"WANDB_MODE": "offline", "MLFLOW_DISABLE_TELEMETRY": "true", "WANDB_ERROR_REPORTING": "false"}
    env.update(
        {name: str(tmp_path / name.lower()) for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR")}
    )
    run_snakemake(tmp_path, "--profile", str(REPO / "profiles" / "local"), "--configfile", str(configfile), env=env)
    records = {
        tracker: json.loads((campaign.root / "export" / f"{tracker}.json").read_text())["runs"]
        for tracker in ("mlflow", "wandb")
    }
    assert [run["name"] for run in records["mlflow"]] == ["t/standin-policy/standin"]
    assert [run["name"] for run in records["wandb"]] == ["t/standin-policy/standin"]
    assert (tmp_path / "wb" / "wandb").is_dir() and str(tmp_path / "wb") in records["wandb"][0]["where"]
    mlflow_run = tmp_path / "mlruns" / "*" / records["mlflow"][0]["run_id"]
    assert list(tmp_path.glob(str(mlflow_run.relative_to(tmp_path)))), "the MLflow run is not in the store"
