"""The simulator side of the node checks: run a benchmark's node checks in its own interpreter.

    python -m evalwf.job.sim_checks BENCHMARK SECTION_JSON_FILE     # internal: `evalwf doctor` and workers start it

Imports the simulator-side entry point (evalwf.job.sim_step: the job code and its light core) and the benchmark's
adapter, then runs the adapter's node_checks (evalwf.benchmark.node_checks) and prints one result per line for
evalwf.job.node_probe, which starts this in `benchmarks.<name>.python` as a worker would run its jobs. Exit
status 1 when the adapter could not even declare its checks (its traceback on stderr).

Runs in a simulator's interpreter: light core only, Python 3.10.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from evalwf.benchmark.node_checks import LIGHT_CORE, RESULT_PREFIX, CheckResult, run_checks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m evalwf.job.sim_checks BENCHMARK SECTION_JSON_FILE", file=sys.stderr)
        return 2
    import evalwf.job.sim_step  # noqa: F401  (the simulator-side entry point and its light core import here)
    from evalwf.benchmark.adapter import benchmark_settings, get_adapter

    benchmark, section_file = args
    section = json.loads(Path(section_file).read_text(encoding="utf-8"))
    adapter = get_adapter(benchmark)
    python = sys.version.split()[0]
    found = f"Python {python}: evalwf.job.sim_step and {type(adapter).__module__} import"
    print(RESULT_PREFIX + CheckResult(benchmark, LIGHT_CORE, True, found).to_json(), flush=True)
    try:
        results = run_checks(benchmark, adapter.node_checks(benchmark_settings(benchmark, section)))
    except Exception:  # the adapter itself failed to declare its checks: its traceback is the finding
        traceback.print_exc()
        return 1
    for result in results:
        print(RESULT_PREFIX + result.to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
