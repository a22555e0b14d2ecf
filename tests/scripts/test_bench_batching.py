"""The batching benchmark's arithmetic: the ideal on/off ratio counts the slots that can be busy at once, and the
reply rates come from the middle 80 % of the server's timed replies. Pure functions: the benchmark itself is run by
hand (docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scriptkit import load_script

REPO = Path(__file__).resolve().parents[2]


batching = load_script("bench_batching")


def test_the_ideal_counts_the_slots_that_can_be_busy_not_the_slots_started():
    assert batching.BATCHES == 7
    assert batching.ideal_ratio(40.0, 3.0, 8) == pytest.approx(43 / (40 / 7 + 3)), "7 batches keep 7 slots busy"
    assert batching.ideal_ratio(40.0, 3.0, 4) == pytest.approx(43 / (40 / 4 + 3))
    assert batching.ideal_ratio(40.0, 3.0, 1) == pytest.approx(1.0)


def test_reply_rates_leave_out_the_first_and_last_tenth(tmp_path):
    replies = [{"t": t, "batch_size": 2, "queue_ms": 1.0, "infer_ms": 4.0} for t in range(10, 90)]
    replies += [{"t": t / 100, "batch_size": 9, "queue_ms": 99.0, "infer_ms": 99.0} for t in range(10)]  # start-up
    replies += [{"t": 1000 + t, "batch_size": 9, "queue_ms": 99.0, "infer_ms": 99.0} for t in range(10)]  # tail
    stats = tmp_path / "stats.jsonl"
    stats.write_text("".join(json.dumps(reply) + "\n" for reply in reversed(replies)))
    rates = batching.reply_rates(stats)
    assert rates == {"observations": 100, "obs_per_s": 1.0, "mean_batch": 2.0, "latency_ms": 5.0}
