"""Live status of a run: `python -m evalwf.report.status results/<run>` (add --watch 10 to refresh).

Done batches and successes come from the result files (validated as for the summary); pending, running and
failed batches come from the Labtasker queue (the embedded server of the workflow directory, or --url /
$LABTASKER_URL), with the failure reason and the batch's log; workers come from their status.json files
(<workflow>/.snakemake/labtasker/workers/*/status.json). Works while the campaign runs and after; numbers of an
unfinished run are labelled partial.

Exit status (for scripts): 0 every batch done and valid; 1 incomplete (batches pending, running or not
submitted); 2 some batch failed, was cancelled or has an invalid result file. --watch N refreshes every N
seconds and ends as soon as nothing is pending or running (complete, or only failed / unsubmitted work left).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from evalwf.common.errors import ResultValidationError
from evalwf.contract.failure import excerpt
from evalwf.plan.campaign import Campaign, PolicyCampaign
from evalwf.plan.config import validate_config
from evalwf.plan.manifest import load_manifest
from evalwf.plan.results import validate_batch_result
from evalwf.queue.tls import connection_problem
from evalwf.report.aggregate import wilson_interval

FAILED_STATES = ("failed", "cancelled", "invalid")
EXIT_COMPLETE, EXIT_INCOMPLETE, EXIT_FAILED = 0, 1, 2


class QueueTask(dict):
    """What status needs of a Labtasker task: its state and, when it failed, why."""

    @property
    def state(self) -> str:
        return self["state"]


def load_run(run_dir: Path, workdir: Path) -> Campaign:
    snapshot_path = run_dir / "campaign.yaml"
    if not snapshot_path.exists():
        raise SystemExit(f"{snapshot_path} not found: is {run_dir} a run directory (results/<run>) of a started run?")
    snapshot = yaml.safe_load(snapshot_path.read_text())
    snapshot.pop("policy_identity", None)
    snapshot.pop("policy_identities", None)  # a run of several policies
    snapshot.pop("benchmark_policies", None)
    config = validate_config(snapshot)
    if not Path(config["results_dir"]).is_absolute():
        config["results_dir"] = str(workdir / config["results_dir"])
    campaign = Campaign(config)
    for benchmark in campaign.benchmarks:  # without it, its manifest names here would be none of the run's
        reason = campaign.environment_unavailable(benchmark)
        if reason:
            raise SystemExit(f"status of {run_dir}: {benchmark}'s environment cannot be read here ({reason})")
    return campaign


@contextlib.contextmanager
def queue_client(workdir: Path, url: str | None, queue: str) -> Iterator[Any]:
    """A Labtasker client of the queue: `url` (the client reads $LABTASKER_TOKEN), else the embedded server of
    `workdir` on its socket (checked to be ours before connecting); None when there is no queue (never started).
    The client announces its connection on stderr: it is kept quiet here (errors still raise)."""
    from evalwf.contract.loopback import with_loopback_no_proxy
    from evalwf.queue.embedded_server import RECORD_FILENAME, answering_endpoint, embedded_root, not_answering
    from evalwf.queue.endpoint import QueueEndpoint

    with_loopback_no_proxy(os.environ)
    if url:
        endpoint = QueueEndpoint(url=url)
    else:
        server_root = embedded_root(workdir, log=lambda _: None)
        endpoint = answering_endpoint(server_root)
        if endpoint is None:
            if not (server_root / RECORD_FILENAME).exists():
                yield None  # never started: no queue
                return
            raise RuntimeError(not_answering(server_root))
    with contextlib.redirect_stderr(io.StringIO()):
        client = endpoint.client(queue)
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.close()


def queue_states(campaign_dir: Path, url: str | None, queue: str) -> dict[str, QueueTask] | None:
    """Absolute output path -> {state, task_id, error, error_log} of its newest Labtasker task; None if there is
    no queue."""
    from evalwf.contract import campaign_key

    with queue_client(campaign_dir, url, queue) as client, contextlib.redirect_stderr(io.StringIO()):
        if client is None:
            return None
        latest: dict[str, Any] = {}  # a changed policy gives a batch a new task: the newest one counts
        cursor = None
        query = f"metadata.campaign == {json.dumps(campaign_key(str(campaign_dir)))}"
        while True:
            page = client.list_tasks(filter=query, limit=1000, cursor=cursor)
            for task in page.items:
                for output in (task.args or {}).get("outputs", []):
                    key = os.path.normpath(output)
                    if key not in latest or task.updated_at > latest[key].updated_at:
                        latest[key] = task
            cursor = page.next_cursor
            if not cursor or not page.items:
                break
    return {key: QueueTask(state=task.status, task_id=task.id, **_error_of(task)) for key, task in latest.items()}


def _error_of(task: Any) -> dict[str, str | None]:
    """The task's error as status shows it (_error_text) and the full log its error names, if any."""
    error = _last_error(task)
    return {"error": _error_text(task), "error_log": excerpt(*error).log if error else None}


def _error_text(task: Any) -> str:
    """The cause of a task's last error (`Type: text`, what failed the job itself), or why its policy's circuit
    breaker cancelled it."""
    error = _last_error(task)
    if error is None:
        result = getattr(task, "result", None)  # a queued task its policy's circuit breaker cancelled says why
        return str(result.get("reason", "")) if isinstance(result, dict) and result.get("stopped_by") else ""
    return excerpt(*error).cause


def _last_error(task: Any) -> tuple[str, str] | None:
    error = getattr(task, "last_error", None)
    if not error:
        return None
    if isinstance(error, dict):
        return str(error.get("type") or ""), str(error.get("message") or "")
    return str(getattr(error, "type", "") or ""), str(getattr(error, "message", "") or "")


def batch_log_path(campaign: PolicyCampaign, batch: Any) -> Path:
    """The Snakemake log of a batch job (the pattern of workflow/rules/evaluate.smk)."""
    logs = campaign.benchmark_dir(batch.ref.benchmark) / "logs" / "batches"
    return logs / batch.ref.suite / batch.ref.task / f"{batch.episodes.label}.log"


def batch_rows(
    campaign: Campaign, states: dict[str, QueueTask] | None, workdir: Path | None = None
) -> list[dict[str, Any]]:
    """One row per planned batch: done (valid result file), invalid, or its queue state; failed and invalid
    rows carry the reason and where to read more. Several policies: each policy's batches, as <policy>/<benchmark>."""
    if not campaign.multi:
        return _policy_batch_rows(campaign.single(), states, workdir)
    rows = []
    for name, member in campaign.members.items():
        rows += [{**r, "benchmark": f"{name}/{r['benchmark']}"} for r in _policy_batch_rows(member, states, workdir)]
    return rows


def _policy_batch_rows(
    campaign: PolicyCampaign, states: dict[str, QueueTask] | None, workdir: Path | None
) -> list[dict[str, Any]]:
    rows = []
    for plan in campaign.tasks:
        manifest = None
        for batch in plan.batches:
            row = {
                "benchmark": plan.ref.benchmark,
                "suite": plan.ref.suite,
                "task": plan.ref.task,
                "batch": batch.episodes.label,
                "episodes": batch.episodes.count,
                "successes": 0,
                "state": "not submitted",
            }
            if Path(batch.path).exists():
                try:
                    manifest = manifest or load_manifest(plan.manifest_path, plan.manifest_hash)
                    result = validate_batch_result(batch.path, campaign.expectation(batch, manifest))
                    row.update(state="done", successes=result["success_count"])
                except (ResultValidationError, ValueError) as error:
                    row.update(state="invalid", error=str(error), log=str(batch.path))
            elif states is not None:
                task = states.get(os.path.normpath(os.path.abspath(batch.path)))
                if task is not None:
                    row["state"] = task.state
                    if task.state in FAILED_STATES:
                        logs = [str(batch_log_path(campaign, batch))]
                        if task.get("error_log"):  # the failed run's own log, which the error names
                            logs.insert(0, str(task["error_log"]))
                        elif workdir is not None:
                            logs.append(str(workdir / ".snakemake" / "labtasker" / "tasks" / task["task_id"]) + "/")
                        row.update(error=task["error"] or task.state, log=" ".join(logs))
            rows.append(row)
    return rows


def status_table(rows: list[dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    table = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    for key, members in groups.items():
        done = [m for m in members if m["state"] == "done"]
        states = Counter(m["state"] for m in members)
        successes, episodes = sum(m["successes"] for m in done), sum(m["episodes"] for m in done)
        low, high = wilson_interval(successes, episodes)
        complete = len(done) == len(members)
        table.append(
            {
                **dict(zip(keys, key, strict=True)),
                "_rate": successes / episodes if episodes else math.nan,
                "success/trials": f"{successes}/{episodes}",
                "success_%": round(100 * successes / episodes, 1) if episodes else float("nan"),
                "ci95_%": f"{100 * low:.1f}-{100 * high:.1f}" if episodes else "",
                "done/total": f"{len(done)}/{len(members)}",
                "pending": states["pending"],
                "running": states["running"],
                "failed": sum(states[s] for s in FAILED_STATES),
                "status": "complete" if complete else "partial",
            }
        )
    return pd.DataFrame(table)


def with_average_rows(suites: pd.DataFrame) -> pd.DataFrame:
    """The suite table plus, per benchmark with several suites, the average of suite rates (as the summary)."""
    if suites.empty:
        return suites.drop(columns="_rate", errors="ignore")
    parts = []
    for benchmark, rows in suites.groupby("benchmark", sort=False):
        parts.append(rows)
        if len(rows) < 2:
            continue
        done = [tuple(map(int, v.split("/"))) for v in rows["done/total"]]
        trials = [tuple(map(int, v.split("/"))) for v in rows["success/trials"]]
        rates = rows["_rate"].dropna()
        sizes = {n for _, n in trials}
        average: dict[str, Any] = {
            "benchmark": benchmark,
            "suite": "average",
            "_rate": float(rates.mean()) if len(rates) else math.nan,
            "success/trials": f"{sum(s for s, _ in trials)}/{sum(n for _, n in trials)}",
            "done/total": f"{sum(d for d, _ in done)}/{sum(t for _, t in done)}",
            **{c: int(rows[c].sum()) for c in ("pending", "running", "failed")},
            "status": "complete" if (rows["status"] == "complete").all() else "partial",
        }
        average["success_%"] = round(100 * average["_rate"], 1) if len(rates) else float("nan")
        average["ci95_%"] = ""
        if len(sizes) == 1 and 0 not in sizes:  # equal suites: the mean of rates is the pooled rate
            low, high = wilson_interval(sum(s for s, _ in trials), sum(n for _, n in trials))
            average["ci95_%"] = f"{100 * low:.1f}-{100 * high:.1f}"
        parts.append(pd.DataFrame([average]))
    return pd.concat(parts, ignore_index=True)[list(suites.columns)].drop(columns="_rate")


def read_workers(workdir: Path, *, history: bool = False) -> list[dict[str, Any]]:
    """Workers of this workflow directory from the status.json each writes after every change: those that may
    still run (alive here, or on another host), and with `history` also the stopped and dead ones (every worker
    ever started here leaves its status.json behind)."""
    rows = []
    here = socket.gethostname()
    for path in sorted((workdir / ".snakemake" / "labtasker" / "workers").glob("*/status.json")):
        try:
            status = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now (written atomically, so only a race on a slow filesystem)
        running = status.get("running") or {}
        if status.get("state") == "stopped":
            alive = "stopped"
        elif status.get("host") == here and status.get("pid"):
            alive = "yes" if _pid_alive(int(status["pid"])) else "dead"
        else:
            alive = f"? (host {status.get('host')})"
        if not history and alive in ("stopped", "dead"):
            continue
        policy = policy_state(status)
        if running and (policy.startswith("loading") or (policy == "dead" and alive == "yes")):
            activity = "loading policy"
        elif running:
            activity = "running"
        else:
            activity = "idle"
        rows.append(
            {
                "worker": status.get("worker_id", path.parent.name),
                "alive": alive,
                "gpu": str(status.get("gpu", "")),
                "activity": activity if alive in ("yes",) or alive.startswith("?") else "-",
                "policy server": policy if alive in ("yes",) or alive.startswith("?") else "-",
                "current batch": ", ".join(str(v or k) for k, v in running.items()) or "-",
                "done": (status.get("tasks") or {}).get("succeeded", (status.get("tasks") or {}).get("done", "")),
                "updated": _age(status.get("updated_at")),
            }
        )
    return rows


def policy_state(status: dict[str, Any]) -> str:
    """The worker's policy server in words: "loading since 12:03:04 (5min ago)", "ready (load #2)", "dead",
    "external" (policy.url: nothing of the worker's own) or "-"."""
    state = status.get("policy_server_state")
    if state is None:  # status.json of an older worker
        state = "ready" if status.get("policy_server_alive") else "dead"
    if state == "loading":
        since = status.get("policy_server_loading_since")
        try:
            clock = datetime.fromisoformat(str(since)).astimezone().strftime("%H:%M:%S")
        except ValueError:
            clock = str(since)
        return f"loading since {clock} ({_age(since)})"
    if state == "ready":
        loads = status.get("policy_server_loads")
        return f"ready (load #{loads})" if loads else "ready"
    return state if state in ("dead", "external") else "-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _age(stamp: str | None) -> str:
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(str(stamp))).total_seconds()
    except (TypeError, ValueError):
        return "?"
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}min ago"


def exit_code(rows: list[dict[str, Any]]) -> int:
    if any(r["state"] in FAILED_STATES for r in rows):
        return EXIT_FAILED
    return EXIT_COMPLETE if all(r["state"] == "done" for r in rows) else EXIT_INCOMPLETE


def settled(rows: list[dict[str, Any]]) -> bool:
    """Nothing is pending or running: watching longer shows nothing new."""
    return not any(r["state"] in ("pending", "running") for r in rows)


def render(
    campaign: Campaign, rows: list[dict[str, Any]], queue_known: bool, workers: list[dict[str, Any]] | None = None
) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    suites = with_average_rows(status_table(rows, ["benchmark", "suite"]))
    tasks = status_table(rows, ["benchmark", "suite", "task"]).drop(columns="_rate", errors="ignore")
    done = sum(r["state"] == "done" for r in rows)
    failed = [r for r in rows if r["state"] in FAILED_STATES]
    header = f"run {campaign.run}: {done}/{len(rows)} batches done" + (
        "" if queue_known else " (no Labtasker queue found: pending/running/failed not known)"
    )
    if failed:
        header += f", {len(failed)} FAILED"
    if done < len(rows):
        header += " - PARTIAL numbers"
    parts = [header, suites.to_string(index=False), tasks.to_string(index=False)]
    if workers:
        parts.append("workers:\n" + pd.DataFrame(workers).to_string(index=False))
    if failed:
        lines = [f"failed batches ({len(failed)}):"]
        for r in failed[:10]:
            reason = " ".join(str(r.get("error", "")).split())
            lines.append(f"  {r['benchmark']} {r['suite']}/{r['task']} {r['batch']}: {r['state']}: {reason[:300]}")
            lines.append(f"    log: {r.get('log', '')}")
        if len(failed) > 10:
            lines.append(f"  ... and {len(failed) - 10} more")
        parts.append("\n".join(lines))
    return "\n\n".join(parts), suites, tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="results/<run>")
    parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="the workflow's working directory")
    parser.add_argument("--url", default=os.environ.get("LABTASKER_URL"), help="Labtasker URL (default: embedded)")
    parser.add_argument("--queue", default=os.environ.get("SNAKEMAKE_LABTASKER_QUEUE", "evalwf"))
    parser.add_argument(
        "--watch", type=float, default=0, help="refresh every N seconds until nothing is pending or running"
    )
    parser.add_argument("--csv", type=Path, help="also write status_suites.csv and status_tasks.csv here")
    parser.add_argument("--all", action="store_true", help="list stopped and dead workers too (default: live ones)")
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    campaign = load_run(args.run_dir, workdir)
    said: set[str] = set()
    while True:
        try:
            states = queue_states(workdir, args.url, args.queue)
        except Exception as error:  # the queue is optional for status: say so (once) and go on with the files
            reason = connection_problem(error, args.url)
            if reason not in said:
                print(f"(Labtasker queue not reachable: {reason})", file=sys.stderr)
                said.add(reason)
            states = None
        rows = batch_rows(campaign, states, workdir)
        text, suites, tasks = render(campaign, rows, states is not None, read_workers(workdir, history=args.all))
        if args.watch and sys.stdout.isatty():
            print("\033[2J\033[H", end="")
        print(text, flush=True)
        if args.csv:
            args.csv.mkdir(parents=True, exist_ok=True)
            suites.to_csv(args.csv / "status_suites.csv", index=False)
            tasks.to_csv(args.csv / "status_tasks.csv", index=False)
        if not args.watch or settled(rows):
            return exit_code(rows)
        time.sleep(args.watch)


if __name__ == "__main__":
    sys.exit(main())
