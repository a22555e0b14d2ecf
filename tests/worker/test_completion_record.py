"""The record of a job step's success that lets a worker adopt a run whose report was lost: only that run, only
while its outputs are the files it wrote (the end-to-end case: tests/plugin/test_server_outages.py)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from evalwf.contract import ADOPT_RUN_METADATA
from evalwf.worker.completion_record import lost_run, recorded_result, write_record


def task(error_type: str | None = None, run_id: str = "r_lost", metadata: dict | None = None) -> SimpleNamespace:
    error = SimpleNamespace(type=error_type, run_id=run_id) if error_type else None
    return SimpleNamespace(last_error=error, metadata=metadata or {})


def test_the_lost_run_is_named_by_an_expired_lease_or_by_the_submitter():
    assert lost_run(task("HeartbeatTimeout")) == "r_lost"  # Labtasker requeued it (attempts left)
    assert lost_run(task(metadata={ADOPT_RUN_METADATA: "r_named"})) == "r_named"  # the submitter requeued it
    assert lost_run(task("JobStepFailed")) is None, "a real failure is evaluated again"
    assert lost_run(task()) is None, "a new task (a forced rerun recreates its task) is evaluated"


def test_a_run_is_adopted_only_while_its_outputs_are_the_files_it_wrote(tmp_path: Path):
    output = tmp_path / "results" / "batch.json"
    output.parent.mkdir()
    output.write_text('{"episodes": 2}')
    workdir = str(tmp_path)
    assert recorded_result(workdir, "t_x", "r_1", [str(output)])[0] is None, "no record: not adopted"
    write_record(workdir, "t_x", "r_1", [str(output)], {"worker": "w"})
    assert recorded_result(workdir, "t_x", "r_1", [str(output)]) == ({"worker": "w"}, "")
    assert recorded_result(workdir, "t_x", "r_2", [str(output)])[0] is None, "another run's record"
    assert recorded_result(workdir, "t_x", "r_1", [str(output), str(tmp_path / "other")])[0] is None
    os.utime(output, ns=(0, output.stat().st_mtime_ns + 1_000_000))
    result, why = recorded_result(workdir, "t_x", "r_1", [str(output)])
    assert result is None and "changed since run r_1 wrote it" in why
    output.unlink()
    assert recorded_result(workdir, "t_x", "r_1", [str(output)])[0] is None
