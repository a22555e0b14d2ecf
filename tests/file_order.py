"""The order in which `make test` hands test files to its pytest workers: the slowest first.

`--dist loadfile` gives each worker one whole file at a time, from the front of one queue. xdist's own order (most
tests first) put the files of one or two long campaigns at the end of that queue, so the suite ended on one worker
running a 50-80 s campaign while the other core had nothing left to do. Longest first (the classic longest
processing time rule) ends the suite on the many short files instead. The Makefile passes `--no-loadscope-reorder`
so that xdist keeps the order the workers collected, which `order_by_expected_seconds` sets.

A file's expected seconds: tests/file_seconds.json where it names the file, otherwise an estimate from its tests
(SLOW_TEST_S per test marked slow, as docs/test-suite.md asks for a test over about 20 s, FAST_TEST_S per other
test). The committed file is the record of a fresh-clone `make test` with three workers (commit bf18e0a, 140
files, 2149 s in all over the three workers, while another session's benchmarks loaded the machine). A new record
replaces it: `EVALWF_RECORD_FILE_SECONDS=$PWD/tests/file_seconds.json make test` writes every file's seconds.
Only the order changes: every test still runs, each file still on one worker.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

FILE_SECONDS = Path(__file__).resolve().parent / "file_seconds.json"
SLOW_TEST_S = 20.0
FAST_TEST_S = 0.3


def recorded_seconds(path: Path = FILE_SECONDS) -> dict[str, float]:
    """Seconds per test file (a path relative to the repository, as pytest's node ids start) from a recorded run."""
    if not path.exists():
        return {}
    return {name: float(seconds) for name, seconds in json.loads(path.read_text()).items()}


def expected_seconds(items: Iterable[pytest.Item], recorded: dict[str, float]) -> dict[str, float]:
    """Each file's expected seconds: recorded if it was, otherwise estimated from its tests' slow marks."""
    estimate: dict[str, float] = defaultdict(float)
    for item in items:
        estimate[file_of(item.nodeid)] += SLOW_TEST_S if item.get_closest_marker("slow") else FAST_TEST_S
    return {name: recorded.get(name, seconds) for name, seconds in estimate.items()}


def order_by_expected_seconds(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort in place, slowest file first; a file's tests keep their order and stay together (a stable sort on a
    per-file key), so module fixtures are built once as before."""
    items.sort(key=lambda item: -seconds[file_of(item.nodeid)])


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class FileSecondsRecorder:
    """Sums each file's setup, call and teardown seconds as the reports arrive (in the xdist controller, from every
    worker) and writes them where EVALWF_RECORD_FILE_SECONDS says, for the next runs' order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def write(self, path: Path) -> None:
        rounded = {name: round(seconds, 1) for name, seconds in sorted(self.seconds.items())}
        path.write_text(json.dumps(rounded, indent=1) + "\n")


def makespan(seconds: Sequence[float], workers: int) -> float:
    """The wall time of handing files in this order to `workers` workers, each taking the next file when free:
    what `--dist loadfile` does (ignoring its prefetch of one file)."""
    free_at = [0.0] * workers
    for duration in seconds:
        first_free = free_at.index(min(free_at))
        free_at[first_free] += duration
    return max(free_at)
