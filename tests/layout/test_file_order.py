"""The order make test hands files to its workers (tests/file_order.py): slowest first, files kept whole."""

from __future__ import annotations

from dataclasses import dataclass, field

from conftest import REPO
from file_order import (
    FAST_TEST_S,
    SLOW_TEST_S,
    expected_seconds,
    file_of,
    makespan,
    order_by_expected_seconds,
    recorded_seconds,
)


@dataclass
class Collected:
    """What the ordering reads of a collected test: its node id and whether it is marked slow."""

    nodeid: str
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.marks else None


def test_slowest_file_first_and_each_file_kept_whole_in_its_order():
    items = [
        Collected("tests/a.py::one"),
        Collected("tests/a.py::two"),
        Collected("tests/b.py::campaign", {"slow"}),
        Collected("tests/c.py::recorded"),
        Collected("tests/b.py::other"),
    ]
    seconds = expected_seconds(items, {"tests/c.py": 75.0})
    assert seconds == {"tests/a.py": 2 * FAST_TEST_S, "tests/b.py": SLOW_TEST_S + FAST_TEST_S, "tests/c.py": 75.0}
    order_by_expected_seconds(items, seconds)
    assert [item.nodeid for item in items] == [
        "tests/c.py::recorded",
        "tests/b.py::campaign",
        "tests/b.py::other",
        "tests/a.py::one",
        "tests/a.py::two",
    ]


def test_longest_first_does_not_end_on_one_busy_worker():
    # xdist's own order (most tests first) left a one-test 80 s campaign for last
    assert makespan([10, 10, 10, 10, 80], workers=2) == 100
    assert makespan([80, 10, 10, 10, 10], workers=2) == 80


def test_every_recorded_file_exists():
    """A test file renamed or moved must be renamed in tests/file_seconds.json too, or it loses its place."""
    missing = [name for name in recorded_seconds() if not (REPO / file_of(name)).is_file()]
    assert not missing, f"tests/file_seconds.json names files that do not exist (rename them there): {missing}"
