"""The reference comparison in percentage points (the report itself: test_report_landing.py)."""

from __future__ import annotations

import pytest

from evalwf.report.aggregate import TaskTally
from evalwf.report.reference import compare_with_reference


def test_reference_comparison_in_percentage_points():
    tallies = [
        TaskTally("a", "t1", episodes=50, successes=45),
        TaskTally("a", "t2", episodes=50, successes=35),
        TaskTally("b", "t3", episodes=50, successes=50),
    ]
    table = compare_with_reference("libero", tallies, {"a": 80.0, "b": 70.0, "average": 90.0, "zzz": 1.0})
    rows = {row.suite: row for row in table.itertuples()}
    assert set(rows) == {"a", "b", "average"}, "suites not in the run are skipped"
    assert rows["a"].reproduced_pct == pytest.approx(80.0)
    assert rows["a"].difference_pp == pytest.approx(0.0)
    assert rows["a"].outside_ci is False
    assert rows["b"].reproduced_pct == pytest.approx(100.0)
    assert rows["b"].difference_pp == pytest.approx(30.0)
    assert rows["b"].outside_ci is True, "70% is outside the Wilson interval of 50/50"
    assert rows["average"].reproduced_pct == pytest.approx(90.0)
