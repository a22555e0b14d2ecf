"""`make demo`: the embedded default end to end on one machine.

Starts (idempotently) the embedded Labtasker server for this directory, two local workers (GPU labels 0 and 1;
on a CPU-only machine they are just labels), submits the campaign with `snakemake --profile profiles/labtasker`,
stops the workers, and prints the summary tables.

    python scripts/demo.py [CONFIG]        # default config/demo.yaml
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.runtime.processes import GuardedProcess  # noqa: E402
from evalwf_contract.embedded_server import ensure_embedded_server  # noqa: E402


def main(argv: list[str]) -> int:
    config = (Path(argv[0]) if argv else REPO / "config" / "demo.yaml").resolve()  # snakemake runs in REPO
    shown = os.path.relpath(config, REPO)
    run = yaml.safe_load(config.read_text())["run"]
    url = ensure_embedded_server(REPO)
    worker_log = REPO / ".snakemake" / "labtasker" / "demo-workers.log"
    print(f"demo: embedded Labtasker server {url}; two workers (log {worker_log.relative_to(REPO)})", flush=True)
    workers = GuardedProcess(
        # no --url: workers of this directory find its embedded server (and its token) themselves
        [sys.executable, "-m", "benchmarks.runtime.worker", "--gpus", "0,1", "--idle-timeout", "0"],
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
    subprocess.call([sys.executable, "-m", "benchmarks.status", f"results/{run}"], cwd=REPO)
    print(
        f"\nresults: results/{run}/  (CSVs, success_by_task.png); HTML report: "
        f"snakemake --configfile {shown} --report results/{run}/report.html"
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
