"""Size a GPU node with the campaign's own policy before a campaign: how many job slots (`--slots K`) it can feed.

    evalwf policy bench --configfile CONFIG [CONFIG ...] [--policy NAME] [--benchmark NAME]
                        [--slots 1,2,4,8,16,32] [--seconds S] [--batching on|off|both] [--json OUT]
                        [--check-determinism]

Per K the policy server is started as a worker with `--slots K` starts it (the policy's command, environment and
{gpu}; EVALWF_POLICY_MAX_BATCH = K, or 1 with batching off), or reached at its `url`; K client processes send it the
benchmark's requests back to back for S seconds, built by the same code as a job step's (the adapter's sample
observation, tagged with its episode and step). Printed per K: observations/s, p50 / p95 round-trip latency, the
mean batch the server formed (where it reports server_timing), the GPU memory of the server's processes
(nvidia-smi, where present) and the CPU cores the server used. Then, with the benchmark's simulator time per request
(measured by earlier batches under results_dir, else the stand-in's emulated step time, else the benchmark's
documented figure; times replan_steps), one recommendation line (evalwf.policy.slots_advice says the rule).

--check-determinism: the same (episode, step) requests served alone and in batches of the largest K; prints how
many were bitwise identical and the largest difference (exit status 0 either way: it is a measurement).
Exit status 0 when measured, 1 when the policy failed, 2 for a bad config or option.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evalwf.benchmark.adapter import get_adapter
from evalwf.common.errors import ConfigError
from evalwf.plan.campaign import Campaign, PolicyCampaign
from evalwf.plan.config import load_config
from evalwf.plan.cost import emulated_step_time, suite_timings
from evalwf.plan.manifest import load_manifest
from evalwf.policy.bench_load import LoadResult, RequestSource, drive, tagged_request
from evalwf.policy.client import PolicyServerError, check_endpoint
from evalwf.policy.determinism import DeterminismReport, check_determinism
from evalwf.policy.slots_advice import SlotAdvice, SlotMeasurement, recommend
from evalwf.policy.spec import PolicySpec

DEFAULT_SLOTS = "1,2,4,8,16,32"


@dataclasses.dataclass(frozen=True)
class SimTime:
    """Simulator seconds a job slot spends per policy request, and where the figure comes from."""

    per_request_s: float
    source: str


@dataclasses.dataclass(frozen=True)
class Row:
    slots: int
    batching: str
    load: LoadResult
    gpu_mib: float | None
    server_cores: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "batching": self.batching,
            "obs_per_s": round(self.load.obs_per_s, 2),
            "p50_ms": round(self.load.latency_quantile_ms(0.5), 2),
            "p95_ms": round(self.load.latency_quantile_ms(0.95), 2),
            "mean_batch": None if self.load.mean_batch is None else round(self.load.mean_batch, 2),
            "replies": len(self.load.latencies_ms),
            "seconds": round(self.load.seconds, 2),
            "gpu_mib": self.gpu_mib,
            "server_cores": None if self.server_cores is None else round(self.server_cores, 2),
        }

    def text(self) -> str:
        batch = "-" if self.load.mean_batch is None else f"{self.load.mean_batch:.2f}"
        gpu = "-" if self.gpu_mib is None else f"{self.gpu_mib:.0f}"
        cores = "-" if self.server_cores is None else f"{self.server_cores:.2f}"
        return (
            f"{self.slots:>3} {self.batching:<4} {self.load.obs_per_s:8.1f} {self.load.latency_quantile_ms(0.5):8.1f} "
            f"{self.load.latency_quantile_ms(0.95):8.1f} {batch:>6} {gpu:>8} {cores:>6}"
        )


HEADER = f"{'K':>3} {'batch':<4} {'obs/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'mean':>6} {'GPU MiB':>8} {'cores':>6}"


def parse_slots(text: str) -> list[int]:
    try:
        slots = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slots expects comma-separated integers like {DEFAULT_SLOTS}") from None
    if not slots or slots[0] < 1:
        raise argparse.ArgumentTypeError(f"--slots expects integers >= 1 like {DEFAULT_SLOTS}, got {text!r}")
    return slots


def sim_time(campaign: PolicyCampaign, benchmark: str, override_ms: float | None) -> SimTime:
    """Simulator seconds per request: --sim-ms, else measured (results_dir), else emulated, else documented; each
    a step time times the benchmark's replan_steps (one request per replan_steps steps)."""
    if override_ms is not None:
        return SimTime(override_ms / 1000.0, "--sim-ms")
    plan = campaign.tasks_of(benchmark)[0]
    replan = int(getattr(campaign.settings(benchmark), "replan_steps", 1))
    timing = suite_timings(campaign).get((benchmark, plan.ref.suite))
    if timing is not None:
        where = f"measured: {timing.episodes} episodes under {campaign.config.results_dir}"
        return SimTime(timing.step_s * replan, f"{timing.step_s:.3f} s/step x replan_steps {replan} ({where})")
    emulated = emulated_step_time(campaign.section(benchmark), plan.ref)
    if emulated > 0:
        return SimTime(emulated * replan, f"{emulated:.3f} s/step x replan_steps {replan} (emulated step_time_s)")
    documented = get_adapter(benchmark).cost_figures.step_s
    return SimTime(documented * replan, f"{documented:.3f} s/step x replan_steps {replan} (documented figure)")


def sample_request(campaign: PolicyCampaign, benchmark: str) -> tuple[RequestSource, dict[str, Any]]:
    """The campaign's first task of `benchmark` and the observation its job step sends (as `evalwf policy check`
    builds it: the adapter's own function)."""
    adapter = get_adapter(benchmark)
    plan = campaign.tasks_of(benchmark)[0]
    manifest = load_manifest(plan.manifest_path, plan.manifest_hash) if Path(plan.manifest_path).exists() else None
    source = RequestSource(plan.ref.benchmark, plan.ref.suite, plan.ref.task)
    return source, adapter.sample_observation(campaign.settings(benchmark), plan.ref, manifest).observation


@contextlib.contextmanager
def serving(spec: PolicySpec, slots: int, log_dir: Path) -> Iterator[tuple[str, int | None]]:
    """The endpoint (and the pid of the server started here, None for a url) for K = `slots`."""
    if spec.external:
        assert spec.url is not None
        check_endpoint(spec.url, timeout_s=spec.startup_timeout_s, what="policy.url")
        yield spec.url, None
        return
    from evalwf.worker.policy_server import GuardedPolicyServer

    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    with GuardedPolicyServer(gpu=gpu, log_dir=log_dir, slots=slots) as server:
        endpoint = server.ensure(spec)
        assert server.process is not None
        yield endpoint, server.process.pid


def process_tree(pid: int) -> list[Any]:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def cpu_seconds(pid: int | None) -> float | None:
    if pid is None:
        return None
    import psutil

    total = 0.0
    for process in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def gpu_memory_mib(pid: int | None) -> float | None:
    """GPU memory held by the server's processes (nvidia-smi's compute apps); None without nvidia-smi or a server."""
    if pid is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    ours = {process.pid for process in process_tree(pid)}
    used: float | None = None  # None: nvidia-smi lists none of them (no GPU use, or another PID namespace)
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit() and int(fields[0]) in ours:
            with contextlib.suppress(ValueError):
                used = (used or 0.0) + float(fields[1])
    return used


def measure(
    spec: PolicySpec, slots: int, batching: str, source: RequestSource, observation: dict[str, Any], args: Any
) -> Row:
    served = spec if batching == "on" else dataclasses.replace(spec, max_batch=1)
    with (
        tempfile.TemporaryDirectory(prefix="policy-bench-") as log_dir,
        serving(served, slots, Path(log_dir)) as (
            endpoint,
            pid,
        ),
    ):
        before, started = cpu_seconds(pid), time.monotonic()
        load = drive(endpoint, slots, source, observation, args.seconds, timeout_s=spec.infer_timeout_s)
        after, wall = cpu_seconds(pid), time.monotonic() - started
        cores = None if before is None or after is None else (after - before) / wall
        return Row(slots, batching, load, gpu_memory_mib(pid), cores)


def determinism(spec: PolicySpec, slots: int, source: RequestSource, observation: dict[str, Any]) -> Any:
    with (
        tempfile.TemporaryDirectory(prefix="policy-bench-") as log_dir,
        serving(spec, slots, Path(log_dir)) as (
            endpoint,
            _,
        ),
    ):
        return check_determinism(
            endpoint,
            lambda episode, step: tagged_request(source, episode, step, observation),
            slots,
            timeout_s=spec.infer_timeout_s,
        )


def advise(rows: list[Row], sim: SimTime) -> SlotAdvice:
    """The recommendation from the batching-on rows (off where only off was measured)."""
    mode = "on" if any(row.batching == "on" for row in rows) else "off"
    chosen = [row for row in rows if row.batching == mode]
    measurements = [SlotMeasurement(r.slots, r.load.obs_per_s, r.load.latency_quantile_ms(0.5) / 1000) for r in chosen]
    server_cores = max((r.server_cores or 0.0) for r in chosen)
    return recommend(measurements, sim.per_request_s, os.cpu_count() or 1, server_cores)


def write_json(
    args: Any,
    spec: PolicySpec,
    benchmark: str,
    sim: SimTime,
    rows: list[Row],
    advice: SlotAdvice | None = None,
    report: DeterminismReport | None = None,
) -> None:
    """--json OUT: every figure so far (rewritten after each K; the recommendation once all are measured)."""
    if not args.json:
        return
    document = {
        "policy": spec.identity,
        "benchmark": benchmark,
        "cores": os.cpu_count(),
        "seconds_per_k": args.seconds,
        "rows": [row.to_json() for row in rows],
        "sim_s_per_request": sim.per_request_s,
        "sim_source": sim.source,
        "recommendation": None
        if advice is None
        else {**dataclasses.asdict(advice), "line": advice.line(sim.per_request_s)},
        "determinism": None if report is None else {**dataclasses.asdict(report), "line": report.line()},
    }
    args.json.write_text(json.dumps(document, indent=1) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalwf policy bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configfile", nargs="+", required=True, help="campaign config(s), composed as snakemake")
    parser.add_argument("--policy", metavar="NAME", help="the policy of the campaign to bench (default: its first)")
    parser.add_argument("--benchmark", metavar="NAME", help="whose requests to send (default: the policy's first)")
    parser.add_argument(
        "--slots", type=parse_slots, default=parse_slots(DEFAULT_SLOTS), help=f"K values ({DEFAULT_SLOTS})"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per K (default 10)")
    parser.add_argument("--batching", choices=("on", "off", "both"), default="on", help="server batching (default on)")
    parser.add_argument(
        "--sim-ms", type=float, help="simulator milliseconds per request (default: measured/documented)"
    )
    parser.add_argument("--check-determinism", action="store_true", help="compare actions served alone and batched")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every figure here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.seconds <= 0:
        print(f"policy bench: --seconds must be > 0, got {args.seconds:g}", file=sys.stderr)
        return 2
    try:
        campaign = Campaign(load_config(*args.configfile))
    except (ConfigError, OSError) as error:
        print(f"policy bench: {error}", file=sys.stderr)
        return 2
    members = {member.policy.name: member for member in campaign.policy_campaigns()}
    name = args.policy if args.policy is not None else next(iter(members))
    if name not in members:
        print(f"policy bench: no policy {name!r} in this campaign (policies: {', '.join(members)})", file=sys.stderr)
        return 2
    member = members[name]
    benchmark = args.benchmark or member.benchmarks[0]
    if benchmark not in member.benchmarks:
        print(
            f"policy bench: policy {name} does not evaluate {benchmark!r} "
            f"(it evaluates {', '.join(member.benchmarks)})",
            file=sys.stderr,
        )
        return 2
    spec, sim = member.policy, sim_time(member, benchmark, args.sim_ms)
    source, observation = sample_request(member, benchmark)
    modes = ["off", "on"] if args.batching == "both" else [args.batching]
    print(
        f"policy {spec.identity} on {benchmark} (requests of {source.suite}/{source.task}), {os.cpu_count()} cores, "
        f"{args.seconds:g} s per K"
    )
    print(HEADER, flush=True)
    rows: list[Row] = []
    report: DeterminismReport | None = None
    try:
        for slots in args.slots:
            for mode in modes:
                rows.append(measure(spec, slots, mode, source, observation, args))
                write_json(args, spec, benchmark, sim, rows)  # a run stopped later keeps what it measured
                print(rows[-1].text(), flush=True)
        if args.check_determinism:
            report = determinism(spec, max(args.slots), source, observation)
            print(report.line())
    except (PolicyServerError, RuntimeError) as error:
        print(f"policy bench FAILED: policy {name}: {error}", file=sys.stderr)
        return 1
    advice = advise(rows, sim)
    print(f"simulator time per request: {1000 * sim.per_request_s:.0f} ms ({sim.source})")
    print(advice.line(sim.per_request_s))
    write_json(args, spec, benchmark, sim, rows, advice, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
