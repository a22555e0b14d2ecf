"""What a tracker run holds, read from a run's folder (results/<run>/): one TrackerRun per (policy, benchmark).

Everything comes from the run's own records, so an export never disagrees with the tables: the config snapshot
(campaign.yaml), the summary CSVs the gather step wrote (rates and Wilson bounds, as the tables print them), the
batch files (the manifest hash each task was evaluated under, the hosts, the environment a batch recorded) and the
sealed manifests they name (the benchmark's protocol and the packages that defined the episodes).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from evalwf.common.errors import ConfigError
from evalwf.common.json_types import JsonValue
from evalwf.plan.campaign import Campaign, PolicyCampaign
from evalwf.plan.config import validate_config
from evalwf.report.tables import label_columns

# The snapshot's keys that record_campaign adds to the validated config
SNAPSHOT_ONLY_KEYS = ("policy_identity", "policy_identities", "benchmark_policies")
# Per suite and per task, the summary columns exported as metrics
METRIC_COLUMNS = ("success_rate", "ci95_low", "ci95_high", "successes", "episodes")


class ExportError(RuntimeError):
    """A run cannot be exported as it is (not a run folder, not summarised yet); the message names the file and
    the fix."""


@dataclass(frozen=True)
class TrackerRun:
    """One (policy, benchmark) of a campaign run, as a tracker stores it. `key` names it for good: the run, the
    policy identity (a new checkpoint is another tracker run) and the benchmark."""

    run: str
    policy: str
    policy_identity: str
    benchmark: str
    status: str  # complete, or partial (a policy an adaptive sweep dropped)
    params: dict[str, str]
    metrics: dict[str, float]
    artifacts: tuple[tuple[str, Path], ...]  # (folder in the tracker run, file)

    @property
    def key(self) -> str:
        return f"{self.run}/{self.policy_identity}/{self.benchmark}"

    @property
    def name(self) -> str:
        """What a person reads in the tracker's run list."""
        return f"{self.run}/{self.policy}/{self.benchmark}"

    @property
    def digest(self) -> str:
        """The key as an id every tracker accepts (letters and digits)."""
        return hashlib.sha256(self.key.encode()).hexdigest()[:24]


def load_run_campaign(run_dir: Path) -> Campaign:
    """The campaign a run folder records (its campaign.yaml), planned under the folder's own parent: a run copied
    or moved elsewhere is read where it lies."""
    snapshot_path = run_dir / "campaign.yaml"
    if not snapshot_path.is_file():
        raise ExportError(f"{snapshot_path} not found: is {run_dir} a run folder (results/<run>) of a started run?")
    snapshot = yaml.safe_load(snapshot_path.read_text(encoding="utf-8"))
    for key in SNAPSHOT_ONLY_KEYS:
        snapshot.pop(key, None)
    try:
        config = validate_config(snapshot)
    except ConfigError as error:
        raise ExportError(f"{snapshot_path}: {error}") from None
    if config.run != run_dir.resolve().name:
        raise ExportError(f"{snapshot_path} records run {config.run!r}, but its folder is {run_dir.resolve().name!r}")
    return Campaign(config.with_results_dir(str(run_dir.resolve().parent)))


def tracker_runs(run_dir: Path) -> list[TrackerRun]:
    """Every (policy, benchmark) of the run, in config order; ExportError when one has no summary yet."""
    campaign = load_run_campaign(run_dir)
    return [
        _tracker_run(campaign, member, benchmark, run_dir)
        for member in campaign.policy_campaigns()
        for benchmark in member.benchmarks
    ]


def _tracker_run(campaign: Campaign, member: PolicyCampaign, benchmark: str, run_dir: Path) -> TrackerRun:
    paths = member.summary_paths(benchmark)
    tasks_csv, suites_csv = Path(paths["tasks"]), Path(paths["suites"])
    for table in (tasks_csv, suites_csv):
        if not table.is_file():
            raise ExportError(
                f"{table} not found: {member.policy.name} on {benchmark} is not summarised yet; finish the run "
                "(rerun the same snakemake command) before exporting it"
            )
    tasks = pd.read_csv(tasks_csv, keep_default_na=False, dtype={"task": str})
    suites = pd.read_csv(suites_csv, keep_default_na=False)
    complete = (tasks["status"] == "complete").all() and (suites["status"] == "complete").all()
    params = {
        "run": campaign.run,
        "benchmark": benchmark,
        "policy": member.policy.name,
        "policy_identity": member.policy.identity,
        "policy.protocol": member.policy.protocol,
        "policy.command": member.policy.command or "",
        "policy.checkpoint": member.policy.checkpoint or "",
        "policy.url": member.policy.url or "",
        **flat_params("config", member.section(benchmark)),
        **_record_params(member, benchmark),
    }
    artifacts = [("summary", Path(path)) for path in paths.values() if Path(path).is_file()]
    artifacts += [("run", run_dir / name) for name in ("campaign.yaml", "landing.html") if (run_dir / name).is_file()]
    return TrackerRun(
        run=campaign.run,
        policy=member.policy.name,
        policy_identity=member.policy.identity,
        benchmark=benchmark,
        status="complete" if complete else "partial",
        params={key: value for key, value in params.items() if value != ""},
        metrics={**_metrics("suite", suites, label_columns(suites, "tasks")), **_task_metrics(tasks)},
        artifacts=tuple(artifacts),
    )


def metric_name(*parts: str) -> str:
    """A metric key both trackers accept: the parts joined by '/', each part's other characters made '_'."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
    return "/".join("".join(c if c in allowed else "_" for c in str(part)) for part in parts)


def _metrics(level: str, table: pd.DataFrame, labels: list[str]) -> dict[str, float]:
    """Per row of a summary table (a suite, the average of suites, a task): its rate, bounds and counts."""
    found: dict[str, float] = {}
    for _, row in table.iterrows():
        label = "-".join(str(row[c]) for c in labels if str(row[c]) != "")
        found.update(_row_metrics(row, level, label))
    return found


def _task_metrics(tasks: pd.DataFrame) -> dict[str, float]:
    labels = label_columns(tasks, "task")
    found: dict[str, float] = {}
    for _, row in tasks.iterrows():
        suite = "-".join(str(row[c]) for c in labels if str(row[c]) != "")
        found.update(_row_metrics(row, "task", suite, str(row["task"])))
    return found


def _row_metrics(row: pd.Series, *name: str) -> Iterator[tuple[str, float]]:
    for column in METRIC_COLUMNS:
        value = row.get(column, "")
        if value == "" or value is None:
            continue
        number = float(value)
        if not math.isnan(number):  # the average of unequal suites has no interval
            yield metric_name(*name, column), number


def flat_params(prefix: str, value: JsonValue) -> dict[str, str]:
    """A nested document as `prefix.key.subkey` -> text (lists as JSON): the shape trackers' parameters take."""
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for key, item in value.items():
            flat.update(flat_params(f"{prefix}.{key}", item))
        return flat
    return {prefix: value if isinstance(value, str) else json.dumps(value, sort_keys=True)}


def _batch_documents(member: PolicyCampaign, benchmark: str) -> Iterator[dict[str, JsonValue]]:
    for batch in member.batches(benchmark):
        path = Path(batch.path)
        if path.is_file():
            yield json.loads(path.read_text(encoding="utf-8"))


def _joined(values: Iterable[str]) -> str:
    """One value, or every distinct value (sorted) when the batches disagree: a mixed record shows as mixed."""
    return " | ".join(sorted(set(values)))


def _record_params(member: PolicyCampaign, benchmark: str) -> dict[str, str]:
    """What the batch files and the manifests they name record: each task's manifest hash, what the manifests
    share (the benchmark's protocol or simulator, base seed, the environment that defined the episodes), and what
    the batches ran on (hosts, and the environment a batch records, where it does)."""
    hashes: dict[str, set[str]] = {}
    hosts: set[str] = set()
    pythons: set[str] = set()
    environment: dict[str, set[str]] = {}
    for document in _batch_documents(member, benchmark):
        key = f"manifest_hash.{document['suite']}.{document['task']}"
        hashes.setdefault(key, set()).add(str(document["manifest_hash"]))
        worker = document.get("worker")
        if isinstance(worker, dict):
            hosts.update([str(worker["host"])] if worker.get("host") else [])
            pythons.update([str(worker["python"])] if worker.get("python") else [])
        recorded = document.get("environment")  # what a batch records of the environment it ran in, if it does
        if isinstance(recorded, dict):
            for name, value in flat_params("batch_environment", recorded).items():
                environment.setdefault(name, set()).add(value)
    params = {key: _joined(values) for key, values in hashes.items()}
    params["batches.hosts"] = _joined(hosts)
    params["batches.python"] = _joined(pythons)  # the interpreter the job step ran in
    params.update({key: _joined(values) for key, values in environment.items()})
    definitions: dict[str, set[str]] = {}
    digests = sorted(set().union(*hashes.values())) if hashes else []
    for digest in digests:
        for name, value in flat_params("manifest", _manifest_definition(member, benchmark, digest)).items():
            definitions.setdefault(name, set()).add(value)
    # what every manifest of the benchmark shares; what differs per task (its name, index) its hash stands for
    params.update({key: next(iter(values)) for key, values in definitions.items() if len(values) == 1})
    return params


def _manifest_definition(member: PolicyCampaign, benchmark: str, digest: str) -> dict[str, JsonValue]:
    """The definition of the sealed manifest `digest` of `benchmark` (its file name ends in it); {} when the run
    folder no longer holds it."""
    for path in sorted((member.root / benchmark / "manifests").glob(f"*/*.{digest}.json")):
        definition = json.loads(path.read_text(encoding="utf-8")).get("definition", {})
        return definition if isinstance(definition, dict) else {}
    return {}
