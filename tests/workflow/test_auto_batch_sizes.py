"""`batch_size: {auto: ...}` through the real Snakefile: `snakemake -n` plans one job per auto-sized batch, named
as fixed-size batches are, and its plan table shows the sizes."""

from __future__ import annotations

import re

from conftest import job_counts, run_snakemake, standin_config, write_config

from evalwf.plan.campaign import Campaign
from evalwf.plan.config import validate_config


def test_dry_run_plans_one_job_per_auto_sized_batch_and_shows_the_sizes(tmp_path):
    section = {"suites": {"alpha": ["reach", "stack"], "beta": ["pour"]}, "episodes_per_task": 12}
    config = standin_config(tmp_path, standin={**section, "batch_size": {"auto": {"workers": 3, "max": 6}}})
    planned = Campaign(validate_config(config)).single().batches()
    sizes = sorted({batch.episodes.count for batch in planned})
    assert sizes[0] == 1 and sizes[-1] == 6, sizes
    completed = run_snakemake(tmp_path, "-n", "--configfile", str(write_config(tmp_path / "c.yaml", config)))
    output = completed.stdout + completed.stderr
    assert job_counts(output)["evaluate_batch"] == len(planned)
    outputs = set(re.findall(r"output: (\S+/batches/\S+\.json)", output))
    assert outputs == {batch.path for batch in planned}
    assert all(re.search(rf"/\d{{4}}-{batch.episodes.count}\.json$", batch.path) for batch in planned)
    [row] = [line for line in output.splitlines() if line.startswith("total ") and len(line.split()) > 2]  # the plan's
    assert f" {sizes[0]}-{sizes[-1]} " in row, row
    assert "batch sizes auto: factoring for 3 workers" in output
    assert "span on 3 worker(s)" in output, "the plan prices the span on the workers auto plans for"
