"""What the submitter checks before Snakemake writes a finished job's files: the results directory turned read-only
mid-run, and a job's log directory did not exist yet (its job step could not create it). The check skipped a path
whose directory was missing, so Snakemake's own creation of the log ended in a traceback naming no fix."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from snakemake_executor_plugin_labtasker import WorkflowError, check_results_writable


@pytest.fixture
def read_only_results(tmp_path: Path) -> Iterator[Path]:
    """A results directory holding one finished batch's folder, then made read-only: a read-only tmpfs as root (root
    writes through permissions), its permissions taken away otherwise."""
    results = tmp_path / "results"
    results.mkdir()
    mounted = os.geteuid() == 0
    if mounted:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(results)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"root cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    (results / "batches" / "alpha" / "reach").mkdir(parents=True)
    (results / "logs").mkdir()
    try:
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(results)], check=True)
        else:
            for directory in [*sorted(results.rglob("*"), reverse=True), results]:
                directory.chmod(0o555)
        yield results
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(results)], check=False)
        else:
            for directory in [results, *results.rglob("*")]:
                directory.chmod(0o755)


def test_a_log_whose_directory_is_missing_is_checked_where_it_would_be_created(read_only_results):
    log = read_only_results / "logs" / "batches" / "alpha" / "push" / "0002-2.log"
    with pytest.raises(WorkflowError) as refused:
        check_results_writable([str(read_only_results / "batches" / "alpha" / "push" / "0002-2.json"), str(log)])
    message = str(refused.value)
    assert f"cannot write {read_only_results}" in message and "no longer writable" in message, message
    assert "rerun the same command" in message, message


def test_writable_results_pass_whatever_exists_yet(tmp_path):
    results = tmp_path / "results"
    (results / "batches").mkdir(parents=True)
    check_results_writable([str(results / "batches" / "a" / "b.json"), str(results / "logs" / "a" / "b.log")])
