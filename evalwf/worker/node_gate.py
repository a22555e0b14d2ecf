"""A worker refuses the jobs of a benchmark its node cannot run, instead of failing each of them (and each retry).

Before its first job of a benchmark of a campaign, a worker runs that benchmark's node checks as `evalwf doctor` does
(evalwf.job.node_probe, with this worker's GPU) on the benchmark's section of the campaign's config files, once
per distinct section (`--configfile` at start checks a benchmark file's sections before any claim). When they fail,
every job of that benchmark and campaign is handed back uncharged (never run, never counted as an attempt), the
worker's log says why once, and its queue registration names the refusal (evalwf.contract.WORKER_REFUSING_KEY) so
that the submitter shows it. Jobs that run no simulator (summaries) name no benchmark and are never refused.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from benchmarks import registry
from evalwf.benchmark.node_checks import CheckResult
from evalwf.common.commands import evalwf_command
from evalwf.contract.task_payload import target_job_wildcards
from evalwf.job.node_probe import check_benchmark, node_ready

REFUSAL_BACKOFF_S = (1.0, 10.0)  # a refused task goes back to the queue; the slot waits before claiming again
Verdict = tuple[str, ...]  # the failed checks' reasons; empty: the node can run it


def task_benchmarks(target_jobs: Iterable[str]) -> list[str]:
    """The registered benchmarks a (validated) payload's target jobs name in their `benchmark` wildcard."""
    found = []
    for entry in target_jobs:
        value = target_job_wildcards(entry).get("benchmark")
        if value in registry.names() and value not in found:
            found.append(value)
    return found


def _config_stamp(configfiles: tuple[str, ...]) -> tuple[tuple[str, int, int], ...] | None:
    try:
        return tuple((path, (info := os.stat(path)).st_mtime_ns, info.st_size) for path in configfiles)
    except OSError:
        return None


@lru_cache(maxsize=32)
def _benchmark_sections(stamp: tuple[tuple[str, int, int], ...]) -> dict[str, dict[str, Any]]:
    """Each benchmark's section of these config files (cached while they are unchanged); {} when they are not valid."""
    from evalwf.common.errors import ConfigError
    from evalwf.plan.config import benchmark_sections

    try:
        return benchmark_sections(*(path for path, _, _ in stamp))
    except (ConfigError, OSError):
        return {}


class NodeGate:
    """The verdicts of this worker's node checks, per benchmark and section."""

    def __init__(
        self,
        gpu: str,
        log: Callable[[str], None],
        publish: Callable[[dict[str, dict[str, str]]], None],
        check: Callable[..., list[CheckResult]] = check_benchmark,
    ):
        self.gpu, self.log, self.publish, self._check = gpu, log, publish, check
        self._verdicts: dict[tuple[str, str], Verdict] = {}  # (benchmark, its section as JSON) -> verdict
        self._refusing: dict[str, dict[str, str]] = {}  # campaign -> benchmark -> reason (what the queue shows)
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._refused_in_a_row = 0

    def refusal(self, target_jobs: Iterable[str], configfiles: list[str], campaign: str) -> str | None:
        """Why this worker must not run the task (a benchmark its target jobs name failed its checks here), or None."""
        for benchmark in task_benchmarks(target_jobs):
            verdict = self.verdict(tuple(configfiles), benchmark, campaign)
            if verdict:
                self._refused_in_a_row += 1
                return f"{benchmark} cannot run on this node: {'; '.join(verdict)}"
        self._refused_in_a_row = 0
        return None

    def backoff_s(self) -> float:
        """How long a slot waits after handing a refused task back (doubling while only refused tasks come)."""
        low, high = REFUSAL_BACKOFF_S
        return min(high, low * 2 ** max(0, self._refused_in_a_row - 1))

    def verdict(self, configfiles: tuple[str, ...], benchmark: str, campaign: str) -> Verdict:
        """The checks of `benchmark` as these config files configure it, run once per distinct section (slots asking
        together wait for one run; other config files giving the same section reuse it)."""
        section = self._sections(configfiles).get(benchmark)
        if section is None:
            return ()  # unreadable or invalid config files: the job step fails with the config's own error
        key = (benchmark, json.dumps(section, sort_keys=True, default=str))
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._verdicts:
                self._verdicts[key] = self._run(benchmark, section, configfiles)
            verdict = self._verdicts[key]
        self._publish(campaign, benchmark, "; ".join(verdict) if verdict else None)
        return verdict

    def _sections(self, configfiles: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        stamp = _config_stamp(configfiles)
        return {} if stamp is None else _benchmark_sections(stamp)

    def _run(self, benchmark: str, section: dict[str, Any], configfiles: tuple[str, ...]) -> Verdict:
        self.log(f"node checks for {benchmark} of {', '.join(configfiles)} (gpu {self.gpu}) ...")
        results = self._check(benchmark, section, self.gpu)
        for result in results:
            self.log(f"  {result.line()}")
        if node_ready(results):
            self.log(f"node checks for {benchmark} passed: its jobs run here")
            return ()
        self.log(
            f"node checks for {benchmark} FAILED: this worker refuses its jobs (handed back uncharged) until its "
            f"settings change or the worker restarts; `{evalwf_command('doctor', '--gpus', self.gpu)}` shows the "
            "same checks"
        )
        return tuple(result.reason() for result in results if not result.ok and not result.skipped)

    def _publish(self, campaign: str, benchmark: str, reason: str | None) -> None:
        with self._lock:
            refusing = {c: dict(b) for c, b in self._refusing.items()}
            if reason is None:
                refusing.get(campaign, {}).pop(benchmark, None)
                refusing = {c: b for c, b in refusing.items() if b}
            else:
                refusing.setdefault(campaign, {})[benchmark] = reason[:500]
            changed, self._refusing = refusing != self._refusing, refusing
        if changed:
            self.publish(refusing)

    def refusing(self) -> dict[str, dict[str, str]]:
        with self._lock:
            return {c: dict(b) for c, b in self._refusing.items()}

    def check_configs(self, configfiles: list[str], campaign: str) -> list[str]:
        """At start (worker --configfile): every benchmark these config files configure (a benchmark file alone will
        do), checked now; a task whose own config files give the same section reuses the verdict. Returns the
        benchmarks that passed (their jobs run here)."""
        sections = self._sections(tuple(configfiles))
        if not sections:
            self.log(f"--configfile {' '.join(configfiles)}: no valid benchmark section to check at start")
        return [benchmark for benchmark in sections if not self.verdict(tuple(configfiles), benchmark, campaign)]
