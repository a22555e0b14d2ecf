"""`make demo`: the embedded default end to end on one machine.

Starts (idempotently) the embedded Labtasker server for this directory, two local workers (GPU labels 0 and 1;
on a CPU-only machine they are just labels), submits the campaign with `snakemake --profile profiles/labtasker`,
stops the workers, and prints the summary tables.

    evalwf demo [CONFIG]        # default config/demo.yaml; needs a checkout (it runs the workflow there)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from benchmarks import registry
from evalwf.common.commands import evalwf_command, snakemake_command
from evalwf.common.paths import PROJECT_ROOT
from evalwf.queue.embedded_server import ensure_embedded_server
from evalwf.worker.processes import GuardedProcess

REPO = PROJECT_ROOT
STANDIN_POLICY = "benchmarks.standin.policy_server"


def main(argv: list[str]) -> int:
    if not (REPO / "profiles" / "labtasker").is_dir():
        raise SystemExit(f"evalwf demo runs the workflow of a repository checkout; {REPO} is not one (no profiles/)")
    config = (Path(argv[0]) if argv else REPO / "config" / "demo.yaml").resolve()  # snakemake runs in REPO
    shown = os.path.relpath(config, REPO)
    campaign = yaml.safe_load(config.read_text())
    run = campaign["run"]
    url = ensure_embedded_server(REPO)
    worker_log = REPO / ".snakemake" / "labtasker" / "demo-workers.log"
    print(f"demo: embedded Labtasker server {url}; two workers (log {worker_log.relative_to(REPO)})", flush=True)
    workers = GuardedProcess(
        # no --url: workers of this directory find its embedded server (and its token) themselves; the campaign's
        # config file: each checks its node and starts the policy server while snakemake plans
        [
            *[sys.executable, "-m", "evalwf.worker.main", "--gpus", "0,1", "--idle-timeout", "0"],
            *["--configfile", str(config)],
        ],
        cwd=REPO,
        log_path=worker_log,
        grace_s=60.0,
    )
    started = time.monotonic()
    try:
        snakemake = [sys.executable, "-m", "snakemake", "--profile", "profiles/labtasker", "--configfile", str(config)]
        print("demo: " + " ".join(snakemake[2:]), flush=True)
        code = subprocess.call(snakemake, cwd=REPO)
    finally:
        workers.stop(timeout_s=90)
    print(f"\ndemo: campaign finished with exit code {code} in {time.monotonic() - started:.0f}s\n", flush=True)
    subprocess.call([sys.executable, "-m", "evalwf.report.status", f"results/{run}"], cwd=REPO)
    print(
        f"\nresults: results/{run}/  (CSVs, success_by_task.png); HTML report: "
        f"{snakemake_command('--configfile', shown, '--report', f'results/{run}/report.html')}"
    )
    print("\n".join(f"demo: {line}" for line in what_the_numbers_mean(campaign, shown)))
    return code


def what_the_numbers_mean(config: dict, shown: str) -> list[str]:
    """What a demo's success rates say (a stand-in policy, a shortened horizon: nothing about any real policy), and
    where to start with a real one: printed last, under the tables that end in 0/4 successes."""
    reasons = []
    if STANDIN_POLICY in str((config.get("policy") or {}).get("command", "")):
        reasons.append(f"the policy is the stand-in ({STANDIN_POLICY}: small deterministic actions, no learned skill)")
    for name, section in (config.get("benchmarks") or {}).items():
        reasons += registry.adapter(name).protocol_deviations(section or {})
    lines = []
    if reasons:
        lines.append(f"what the success rates mean, per {shown}: " + "; ".join(reasons) + ".")
        lines.append(
            "they say nothing about any real policy: the demo shows the machinery (manifests, queue, workers, "
            "validated batches, summaries), not a score."
        )
    lines.append(
        'your own policy: README.md "Evaluate your own policy" (a `policy` block with your server\'s command; '
        f"{evalwf_command('policy', 'check', '--configfile', 'CONFIG')}; "
        f"{snakemake_command('--profile', 'profiles/labtasker', '--configfile', 'CONFIG')})."
    )
    return lines
