"""Live status of a run: `evalwf status results/<run>` (add --watch 10 to refresh).

Done batches and successes come from the result files (validated as for the summary); pending, running and
failed batches come from the Labtasker queue (the embedded server of the workflow directory, or --url /
$LABTASKER_URL), with the failure reason and the batch's log; workers come from their status.json files
(<workflow>/.snakemake/labtasker/workers/*/status.json). Works while the campaign runs and after; numbers of an
unfinished run are labelled partial. An adaptive sweep's decisions say what its policies evaluate: a dropped
policy's rounds after its drop are no work of the run, and rounds no decision has planned yet are `waiting`. What
the state is comes from evalwf/report/run_state.py; this module lays it out (tables, the workers table, the text).

Exit status (for scripts): 0 every batch done and valid; 1 incomplete (batches pending, running, not submitted
or waiting for a round's decision); 2 some batch failed (its policy's circuit breaker cancelling it included) or has
an invalid result file; 3 none failed but some were cancelled by their submitter (Ctrl-C, SIGHUP, SIGTERM: rerun
the same snakemake command to resume). A batch the queue no longer knows (after `make clean`) is shown from its
failure record under results/ (evalwf/contract/failure_record.py). --watch N
refreshes every N seconds and ends as soon as nothing is pending or running (complete, or only failed / unsubmitted
work left).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import pandas as pd

from evalwf.contract import CLIENT_URL_ENV, QUEUE_ENV, default_queue
from evalwf.plan.campaign import Campaign
from evalwf.plan.rounds import RoundProgress
from evalwf.queue.tls import connection_problem
from evalwf.report.aggregate import wilson_interval
from evalwf.report.environments import BatchRef, environment_lines
from evalwf.report.run_state import (
    CANCELLED,
    FAILED_STATES,
    AdaptiveRounds,
    BatchRow,
    WorkerState,
    adaptive_rounds,
    batch_rows,
    exit_code,
    exit_code_without_queue,
    load_run,
    queue_states,
    read_workers,
    settled,
)


def status_table(rows: list[BatchRow], keys: list[str]) -> pd.DataFrame:
    """Rows grouped by `keys`; an adaptive sweep's tables add the batches `waiting` for a round's decision, and a
    dropped policy's status says after which round it stopped."""
    table = []
    adaptive = any("round" in row for row in rows)
    groups: dict[tuple[str, ...], list[BatchRow]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    for key, members in groups.items():
        done = [m for m in members if m["state"] == "done"]
        states = Counter(m["state"] for m in members)
        successes, episodes = sum(m["successes"] for m in done), sum(m["episodes"] for m in done)
        low, high = wilson_interval(successes, episodes)
        complete = len(done) == len(members)
        dropped = {m.get("dropped") for m in members} - {None, ""}
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
                "cancelled": states[CANCELLED],
                **({"waiting": states["waiting"]} if adaptive else {}),
                # a dropped policy's numbers are partial whatever it finished (never a final score)
                "status": ", ".join(sorted(dropped)) if dropped else "complete" if complete else "partial",
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
            **{c: int(rows[c].sum()) for c in ("pending", "running", "failed", "cancelled", "waiting") if c in rows},
            "status": "complete" if (rows["status"] == "complete").all() else _shared_status(rows["status"]),
        }
        average["success_%"] = round(100 * average["_rate"], 1) if len(rates) else float("nan")
        average["ci95_%"] = ""
        if len(sizes) == 1 and 0 not in sizes:  # equal suites: the mean of rates is the pooled rate
            low, high = wilson_interval(sum(s for s, _ in trials), sum(n for _, n in trials))
            average["ci95_%"] = f"{100 * low:.1f}-{100 * high:.1f}"
        parts.append(pd.DataFrame([average]))
    return pd.concat(parts, ignore_index=True)[list(suites.columns)].drop(columns="_rate")


def _shared_status(statuses: pd.Series) -> str:
    """An average row's status when not every suite is complete: the drop they share, else partial."""
    return statuses.iloc[0] if statuses.nunique() == 1 and statuses.iloc[0].startswith("dropped") else "partial"


def round_lines(rounds: AdaptiveRounds) -> list[str]:
    """Per adaptive benchmark: the decisions written of those there will be, who races, who stopped when and why."""
    lines = []
    for benchmark, (decisions, progress) in rounds.items():
        racing = [name for name, standing in progress.items() if standing.dropped_after is None]
        lines.append(
            f"{benchmark}: adaptive sweep, {len(decisions)} round decision(s) written; "
            f"racing: {', '.join(racing) or 'none'}"
        )
        for name, record in (decisions[-1]["dropped"] if decisions else {}).items():
            lines.append(
                f"  {name} dropped after round {record['round']} ({record['episodes_per_task']} episodes per task): "
                f"e-value {record['e_value']} >= {record['threshold']} against {record['against']}"
                + _discarded_note(progress.get(name))
            )
    return lines


def _discarded_note(standing: RoundProgress | None) -> str:
    """What a dropped policy's speculative batches after its drop came to (speculate_rounds): spent, never read."""
    if standing is None or not (standing.discarded or standing.cancelled):
        return ""
    return (
        f"; discarded (speculative): {standing.discarded} batch(es) evaluated and not counted, "
        f"{standing.cancelled} cancelled (before they started, or between episodes)"
    )


# One worker in the workers table (worker_rows): its columns, as printed
WorkerRow = TypedDict(
    "WorkerRow",
    {
        "worker": str,
        "alive": str,
        "gpu": str,
        "activity": str,
        "policy server": str,
        "current batch": str,
        "done": int | str,
        "updated": str,
    },
)


def worker_rows(workers: list[WorkerState]) -> list[WorkerRow]:
    """The workers table: one row per worker, what it does and its policy server in words."""
    rows = []
    for worker in workers:
        status, alive = worker.status, worker.alive
        running = status.get("running") or {}
        policy = policy_state(status)
        if running and (policy.startswith("loading") or (policy == "dead" and alive == "yes")):
            activity = "loading policy"
        elif running:
            activity = "running"
        else:
            activity = "idle"
        rows.append(
            {
                "worker": worker.worker,
                "alive": alive,
                "gpu": str(status.get("gpu", "")),
                "activity": activity if alive in ("yes",) or alive.startswith("?") else "-",
                "policy server": policy if alive in ("yes",) or alive.startswith("?") else "-",
                "current batch": ", ".join(str(v or k) for k, v in running.items()) or "-",
                "done": (status.get("tasks") or {}).get("succeeded", ""),
                "updated": _age(status.get("updated_at")),
            }
        )
    return rows


def policy_state(status: dict[str, Any]) -> str:
    """The worker's policy server in words: "loading since 12:03:04 (5min ago)", "ready (load #2)", "dead",
    "external" (policy.url: nothing of the worker's own) or "-"."""
    state = status.get("policy_server_state")
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


def _age(stamp: str | None) -> str:
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(str(stamp))).total_seconds()
    except (TypeError, ValueError):
        return "?"
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}min ago"


def render(
    campaign: Campaign,
    rows: list[BatchRow],
    queue_known: bool,
    workers: list[WorkerRow] | None = None,
    rounds: AdaptiveRounds | None = None,
) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    suites = with_average_rows(status_table(rows, ["benchmark", "suite"]))
    tasks = status_table(rows, ["benchmark", "suite", "task"]).drop(columns="_rate", errors="ignore")
    done = sum(r["state"] == "done" for r in rows)
    failed = [r for r in rows if r["state"] in FAILED_STATES]
    waiting = sum(r["state"] == "waiting" for r in rows)
    header = f"run {campaign.run}: {done}/{len(rows)} batches done" + (
        "" if queue_known else " (no Labtasker queue found: pending/running/failed not known)"
    )
    cancelled = [r for r in rows if r["state"] == CANCELLED]
    if failed:
        header += f", {len(failed)} FAILED"
    if cancelled:
        header += f", {len(cancelled)} cancelled (rerun the same snakemake command to resume)"
    if waiting:
        header += f", {waiting} waiting for a round's decision"
    if done < len(rows):
        header += " - PARTIAL numbers"
    done_environments = {
        BatchRef(r["benchmark"], r["suite"], r["task"], r["batch"]): r.get("environment")
        for r in rows
        if r["state"] == "done"
    }
    environment = environment_lines(done_environments)  # flags batches run under several environments
    parts = [header, *(["\n".join(environment)] if environment else [])]
    parts += [*(["\n".join(round_lines(rounds))] if rounds else []), suites.to_string(index=False)]
    parts.append(tasks.to_string(index=False))
    if workers:
        parts.append("workers:\n" + pd.DataFrame(workers).to_string(index=False))
    if failed:
        lines = [f"failed batches ({len(failed)}):"]
        for r in failed[:10]:
            reason = " ".join(str(r.get("error", "")).split())
            lines.append(f"  {r['benchmark']} {r['suite']}/{r['task']} {r['batch']}: {r['state']}: {reason[:300]}")
            lines.append(f"    log: {r.get('log', '')}")
            if r.get("recorded"):  # read from its failure record under results/: the queue no longer knows it
                lines.append(f"    recorded: {r['recorded']} (`evalwf task <id>` shows its log's last lines)")
        if len(failed) > 10:
            lines.append(f"  ... and {len(failed) - 10} more")
        parts.append("\n".join(lines))
    return "\n\n".join(parts), suites, tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="results/<run>")
    parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="the workflow's working directory")
    parser.add_argument("--url", default=os.environ.get(CLIENT_URL_ENV), help="Labtasker URL (default: embedded)")
    parser.add_argument(
        "--queue", default=default_queue(), help=f"Labtasker queue (default: ${QUEUE_ENV}, else evalwf)"
    )
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
        unreachable = False
        try:
            states = queue_states(workdir, args.url, args.queue)
        except Exception as error:  # the queue is optional for status: say so (once) and go on with the files
            reason = connection_problem(error, args.url)
            if reason not in said:
                where = f" at {args.url}" if args.url else ""
                print(f"(Labtasker queue{where} not reachable: {reason})", file=sys.stderr)
                said.add(reason)
            states = None
            unreachable = True
        rounds = adaptive_rounds(campaign) if campaign.multi else {}
        rows = batch_rows(campaign, states, workdir, rounds)
        workers = worker_rows(read_workers(workdir, history=args.all))
        text, suites, tasks = render(campaign, rows, states is not None, workers, rounds)
        if args.watch and sys.stdout.isatty():
            print("\033[2J\033[H", end="")
        print(text, flush=True)
        if args.csv:
            args.csv.mkdir(parents=True, exist_ok=True)
            suites.to_csv(args.csv / "status_suites.csv", index=False)
            tasks.to_csv(args.csv / "status_tasks.csv", index=False)
        if not args.watch or settled(rows):
            return exit_code_without_queue(rows) if unreachable else exit_code(rows)
        time.sleep(args.watch)


if __name__ == "__main__":
    sys.exit(main())
