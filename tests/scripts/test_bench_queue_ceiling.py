"""The queue-ceiling benchmark's own arithmetic: percentiles, the time compression of the emulated workers, the
server's database metrics read from its log, the submitter's window of active batches, and the --workers spec.
Pure functions: the benchmark itself is run by hand (docs/scale.md)."""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import pytest
from scriptkit import load_script

REPO = Path(__file__).resolve().parents[2]


ceiling = load_script("bench_queue_ceiling")

METRICS = (
    "2026-12-05T01:58:37.398Z INFO [labtasker-server] database metrics {'db_connection_wait_seconds': "
    "{'read': {'count': 26, 'total_seconds': 0.25, 'max_seconds': 0.1}, 'write': {'count': 1800, "
    "'total_seconds': 0.5, 'max_seconds': 0.2}}, 'db_transaction_seconds': {'read': {'count': 26, "
    "'total_seconds': 1.5, 'max_seconds': 0.5}, 'write': {'count': 1800, 'total_seconds': 90.0, 'max_seconds': "
    "3.4}, 'expiry': {'count': 2, 'total_seconds': 0.6, 'max_seconds': 0.6}}, 'db_pool_timeouts': {}, "
    "'db_sqlite_busy_failures': {'write': 3}}"
)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    random.Random(3).shuffle(values)
    assert ceiling.percentile(values, 0.5) == 50.0
    assert ceiling.percentile(values, 0.95) == 95.0
    assert ceiling.percentile(values, 1.0) == 100.0
    assert ceiling.percentile([7.0], 0.95) == 7.0
    assert math.isnan(ceiling.percentile([], 0.5))


def test_pacing_compresses_batches_and_heartbeats_alike() -> None:
    pacing = ceiling.Pacing(batch_s=300.0, heartbeat_s=20.0, speedup=10.0)
    assert pacing.emulated_batch_s == 30.0
    assert pacing.emulated_heartbeat_s == 2.0
    assert pacing.claims_per_s_asked(64) == pytest.approx(64 / 30)
    assert pacing.real_workers(64) == 640
    durations = [pacing.batch_duration(random.Random(seed)) for seed in range(200)]
    assert min(durations) >= 15.0
    assert max(durations) <= 45.0
    assert sum(durations) / len(durations) == pytest.approx(30.0, rel=0.1)


def test_the_last_metrics_line_of_the_server_log_is_read() -> None:
    earlier = METRICS.replace("'total_seconds': 90.0", "'total_seconds': 1.0").replace("01:58", "01:57")
    log = "\n".join([earlier, "2026-12-05T01:58:38.000Z INFO [labtasker-server] something else", METRICS])
    metrics = ceiling.last_database_metrics(log)
    assert metrics["at"] == "2026-12-05T01:58:37.398Z"
    assert metrics["transaction_s"]["write"] == 90.0
    assert metrics["transactions"] == {"read": 26, "write": 1800, "expiry": 2}
    assert metrics["busy_failures"] == {"write": 3}
    assert ceiling.last_database_metrics("no metrics here\n") is None


def test_database_shares_per_second_of_the_covered_time() -> None:
    shares = ceiling.database_shares(ceiling.last_database_metrics(METRICS), 60, 0.3)
    assert shares["write_lock_share"] == pytest.approx(1.5)
    assert shares["writes_per_s"] == pytest.approx(30.0)
    assert shares["transactions_per_s"] == pytest.approx(1826 / 60)
    assert shares["busy_failures"] == 3
    assert shares["server_cpu_ms_per_transaction"] == pytest.approx(1000 * 0.3 / (1826 / 60))
    assert ceiling.database_shares(None, 60, 0.3) == {"covers_s": 60, "metrics": None}


def test_active_window_refills_finished_batches_in_queue_order() -> None:
    window = ceiling.ActiveWindow([f"t{i}" for i in range(6)], cap=3)
    assert window.active == ["t0", "t1", "t2"]
    window.finished({"t1"})
    assert window.active == ["t0", "t2", "t3"]
    window.finished({"t0", "t2", "unknown"})
    assert window.active == ["t3", "t4", "t5"]
    window.finished({"t3", "t4", "t5"})
    assert window.active == []
    assert ceiling.ActiveWindow(["a"], cap=10).active == ["a"]


def test_worker_spec_with_its_own_speedup_and_idle_workers() -> None:
    spec = ceiling.WindowSpec
    assert ceiling.window_specs("64,128,256x1", 10.0) == [spec(64, 10.0), spec(128, 10.0), spec(256, 1.0)]
    assert ceiling.window_specs("8x2.5,", 1.0) == [spec(8, 2.5)]
    assert ceiling.window_specs("64x1+192,0+256", 10.0) == [spec(64, 1.0, 192), spec(0, 10.0, 256)]
    for bad in ("0", "x2", "many", "64+", "64x"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a worker count"):
            ceiling.window_specs(bad, 1.0)


def test_requests_are_counted_by_kind_and_status_with_ids_folded() -> None:
    line = '2026-12-05T02:13:45.052Z INFO [labtasker-server] - "{} HTTP/1.1" {}'
    log = "\n".join(
        [
            line.format("POST /api/v2/queues/evalwf/tasks/t_OZORd1uAly6b/heartbeat", 200),
            line.format("POST /api/v2/queues/evalwf/tasks/t_CsSp1MufyaG0/heartbeat", 200),
            line.format("POST /api/v2/queues/evalwf/tasks/claim", 503),
            line.format("GET /api/v2/queues/evalwf/tasks/count", 200),
            line.format("GET /api/v2/queues/evalwf/tasks?filter=id+in+%5B%5D&limit=1000", 200),
            line.format("PUT /api/v2/queues/evalwf/workers/w_abc", 503),
            METRICS,
        ]
    )
    assert ceiling.request_counts(log) == {
        "POST /api/v2/queues/evalwf/tasks/{id}/heartbeat 200": 2,
        "POST /api/v2/queues/evalwf/tasks/claim 503": 1,
        "GET /api/v2/queues/evalwf/tasks/count 200": 1,
        "GET /api/v2/queues/evalwf/tasks 200": 1,
        "PUT /api/v2/queues/evalwf/workers/{id} 503": 1,
    }
