"""Harness cost of a worker: CPU-seconds per batch and memory (PSS and RSS) per busy job slot, on a real campaign
(real Labtasker server, real Snakemake, one real worker) of tiny stand-in batches, so that the harness dominates.

    python scripts/bench_harness_cost.py [--episodes 4] [--slots 1] [--scale-s 0.00005] [--json out.json]
    OTHER/.venv/bin/python scripts/bench_harness_cost.py --repo OTHER      # the worker of another checkout, OTHER

CPU: the worker is waited for with wait4, whose resource usage covers the worker and every process it started and
that was reaped below it (fork server, spares, guardians, job steps, the policy server and its guardian). The policy
server's share (its guardian and itself, sampled from /proc every 50 ms while alive) is subtracted: what is left is
the harness (worker claim loop, fork server, spares, guardians, Snakemake job steps with the stand-in evaluation
they run in process: an upper bound on the harness alone), divided by the number of batches.

Memory: every 0.25 s while a job step runs, PSS and RSS (/proc/PID/smaps_rollup) of every process of the worker's
tree but the worker itself and the policy server: job steps, their guardians, waiting spares and the fork server
(shared by all slots), divided by the job steps running then; also over the samples where every slot was busy (use
a --scale-s long enough for that with --slots > 1). Printed: median and max over those samples, and
each kind's median (a kind's sum per sample). Which checkout's worker runs is the interpreter's (its venv).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scheduling as sched

from evalwf.queue.embedded_server import ensure_embedded_server, stop_embedded_server

TICK = os.sysconf("SC_CLK_TCK")
FORK_SERVER, SPARE = "fork server", "spare or guardian"


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU seconds, own + reaped children's CPU seconds) of a live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), sum(int(value) for value in fields[11:13]) / TICK, sum(map(int, fields[11:15])) / TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _memory(pid: int) -> tuple[float, float]:
    """(PSS, RSS) in MiB."""
    values = {"Pss:": 0.0, "Rss:": 0.0}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, *rest = line.split()
            if key in values:
                values[key] = int(rest[0]) / 1024
    except OSError:
        pass
    return values["Pss:"], values["Rss:"]


class TreeSampler:
    """Samples the worker's process tree: the policy server's CPU, and memory per busy slot."""

    def __init__(self, worker: int, slots: int):
        self.worker, self.slots = worker, slots
        self.policy_cpu: dict[int, float] = {}  # pid -> last seen CPU-s (guardian + server)
        self.worker_own_cpu = 0.0  # the worker process itself (claim loop, heartbeats, reports), last seen
        self.fork_server_cpu = 0.0  # the fork server and what it reaped (spares, their job steps), last seen
        self.per_slot: list[tuple[float, float]] = []  # (PSS, RSS) per busy slot, one per sample
        self.all_busy: list[tuple[float, float]] = []  # the same, of the samples where every slot was busy
        self.kinds: dict[str, list[float]] = {}  # kind -> PSS summed over its processes, one per sample
        self.failed: str | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _tree(self) -> dict[int, tuple[int, float, float]]:
        stats = {int(name): _stat(int(name)) for name in os.listdir("/proc") if name.isdigit()}
        live = {pid: stat for pid, stat in stats.items() if stat is not None}
        tree, frontier = {}, [self.worker]
        while frontier:
            parent = frontier.pop()
            for pid, stat in live.items():
                if stat[0] == parent and pid not in tree:
                    tree[pid] = stat
                    frontier.append(pid)
        return tree

    def _run(self) -> None:
        try:
            self._sample()
        except Exception as error:  # said at the end, not hidden behind "no samples"
            self.failed = f"{type(error).__name__}: {error}"

    def _sample(self) -> None:
        last_memory = 0.0
        while not self.done.wait(0.05):
            own = _stat(self.worker)
            if own is not None:
                self.worker_own_cpu = own[1]
            tree = self._tree()
            commands = {pid: _cmdline(pid) for pid in tree}
            policy = {pid for pid, command in commands.items() if "policy_server" in command}
            policy |= {pid for pid, stat in tree.items() if stat[0] in policy}
            for pid in policy:
                self.policy_cpu[pid] = tree[pid][2]
            harness = {pid: stat[0] for pid, stat in tree.items() if pid not in policy}
            kinds = {pid: self._kind(pid, harness, commands) for pid in harness}
            for pid, kind in kinds.items():
                if kind == FORK_SERVER:
                    self.fork_server_cpu = tree[pid][2]
            steps = [pid for pid in harness if kinds[pid] == "job step" and kinds.get(harness[pid]) == SPARE]
            if not steps or time.monotonic() - last_memory < 0.25:
                continue
            last_memory = time.monotonic()
            memory = {pid: _memory(pid) for pid in harness}
            steps = [pid for pid in steps if memory[pid][0] > 0]  # (one that ended meanwhile is not a busy slot)
            if not steps:
                continue
            sample = (sum(m[0] for m in memory.values()) / len(steps), sum(m[1] for m in memory.values()) / len(steps))
            self.per_slot.append(sample)
            if len(steps) == self.slots:
                self.all_busy.append(sample)
            for kind in (FORK_SERVER, SPARE, "job step"):
                self.kinds.setdefault(kind, []).append(sum(memory[pid][0] for pid in harness if kinds[pid] == kind))

    def _kind(self, pid: int, parents: dict[int, int], commands: dict[int, str]) -> str:
        """The worker's children: its fork server, or spares and guardians started as fresh interpreters; the fork
        server's children: spares and guardians; anything below a spare or guardian: its job step."""
        parent = parents[pid]
        if parent == self.worker:
            return FORK_SERVER if "evalwf.worker.fork_server" in commands[pid] else SPARE
        if parent in parents and parents[parent] == self.worker and "evalwf.worker.fork_server" in commands[parent]:
            return SPARE
        return "job step"

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)


def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        workdir = Path(tmp)
        cache = workdir / "cache"
        config = sched.campaign_config(workdir, cache, args.episodes, 1, args.scale_s)
        sched.build_manifests(workdir, config)
        ensure_embedded_server(workdir, log=lambda _: None)
        env = sched.embedded_env()
        argv = [
            *(sys.executable, "-m", "evalwf.worker.main", "--gpus", "0", "--slots", str(args.slots)),
            *("--idle-timeout", "0", "--poll-max", "0.5", "--allow-workflow", str(workdir)),
            *("--allow-workflow", str(sched.REPO)),
        ]
        with open(workdir / "worker.log", "wb") as out:
            worker = subprocess.Popen(argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=env)
        sampler = TreeSampler(worker.pid, args.slots)
        try:
            time.sleep(2.0)
            submit = sched.snakemake_argv(
                workdir,
                config,
                *("--profile", str(sched.REPO / "profiles" / "labtasker"), "--labtasker-allow-workflow"),
                str(sched.REPO),
            )
            done = subprocess.run(submit, cwd=workdir, env=env, capture_output=True, text=True, timeout=1800)
            if done.returncode:
                raise SystemExit(f"campaign failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
            batches = sum("batches" in path.parts for path in (workdir / "results").rglob("*.json"))
        finally:
            worker.send_signal(signal.SIGTERM)
            _, status, usage = os.wait4(worker.pid, 0)
            worker.returncode = os.waitstatus_to_exitcode(status)
            sampler.stop()
            stop_embedded_server(workdir / ".labtasker")
    tree_cpu = usage.ru_utime + usage.ru_stime
    policy_cpu = sum(sampler.policy_cpu.values())
    if sampler.failed is not None:
        raise SystemExit(f"sampling the worker's processes failed: {sampler.failed}")
    pss = [sample[0] for sample in sampler.per_slot] or [float("nan")]
    rss = [sample[1] for sample in sampler.per_slot] or [float("nan")]
    return {
        "checkout": str(sched.REPO),
        "slots": args.slots,
        "batches": batches,
        "worker_tree_cpu_s": round(tree_cpu, 2),
        "policy_server_cpu_s": round(policy_cpu, 2),
        "worker_own_cpu_s": round(sampler.worker_own_cpu, 2),
        "fork_server_tree_cpu_s": round(sampler.fork_server_cpu, 2),
        "harness_cpu_s_per_batch": round((tree_cpu - policy_cpu) / max(1, batches), 3),
        "pss_mib_per_busy_slot": {"median": round(statistics.median(pss), 1), "max": round(max(pss), 1)},
        "rss_mib_per_busy_slot": {"median": round(statistics.median(rss), 1), "max": round(max(rss), 1)},
        "every_slot_busy": {
            "samples": len(sampler.all_busy),
            "pss_mib_per_slot_median": round(statistics.median([s[0] for s in sampler.all_busy] or [float("nan")]), 1),
            "rss_mib_per_slot_median": round(statistics.median([s[1] for s in sampler.all_busy] or [float("nan")]), 1),
        },
        "pss_mib_by_kind_median": {kind: round(statistics.median(v), 1) for kind, v in sampler.kinds.items()},
        "samples": len(pss),
        "load_average": os.getloadavg(),
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per task; 7 tasks, one batch per episode")
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--scale-s", type=float, default=0.00005, help="stand-in seconds per step-limit step")
    parser.add_argument("--repo", type=Path, default=sched.REPO, help="the checkout whose workflow runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sched.REPO = args.repo.resolve()
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start", flush=True)
    started = time.monotonic()
    result = run(args)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
