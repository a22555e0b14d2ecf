"""What the workers would refuse is refused by the submitter before it creates any task, with the fix: a config
file or the Snakefile outside the workflow directories the workers allow, or where jobs, Snakemake or the queue
write (one rule for both sides: evalwf.contract.allowed_files). A config outside the workflow directory used to be
submitted, then failed on the workers, every retry again."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import pytest
from conftest import REPO, SNAKEFILE, run_snakemake, standin_config, write_config
from labtasker_testkit import LABTASKER_PROFILE, all_tasks, client, labtasker_url, queue

from evalwf.contract.allowed_files import code_file_refusal, written_by_tools
from evalwf.worker.job_payload import TaskRefused, validate_task


def test_a_config_outside_the_workflow_directory_is_refused_before_any_task_exists(
    labtasker_url, queue, client, tmp_path
):
    workdir = tmp_path / "wf"
    workdir.mkdir()
    elsewhere = tmp_path / "configs"
    elsewhere.mkdir()
    outside = write_config(elsewhere / "campaign.yaml", standin_config(workdir))
    done = run_snakemake(
        workdir, *LABTASKER_PROFILE, "--configfile", str(outside), "--labtasker-url", labtasker_url,
        "--labtasker-queue", queue, check=False, timeout=120,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode != 0, text[-3000:]
    assert f"config file {outside} is not inside an allowed directory ({workdir}, {REPO})" in text, text[-3000:]
    assert f"start the workers with --allow-workflow {elsewhere} besides --allow-workflow {workdir}" in text
    assert f"submit with --labtasker-allow-workflow {elsewhere}" in text
    assert all_tasks(client) == [], "a task was created"


def test_submitter_and_worker_refuse_the_same_code_files(tmp_path):
    """The submitter's check (code_file_refusal of the Snakefile and the config files the task names) says what
    validate_task says, and both take the files once their directory is allowed."""
    from test_trust import payload  # what the plugin submits for one batch

    workdir = tmp_path / "wf"
    elsewhere = tmp_path / "configs"
    elsewhere.mkdir()
    write_config(elsewhere / "campaign.yaml", standin_config(workdir))
    (workdir / ".snakemake").mkdir(parents=True)
    write_config(workdir / ".snakemake" / "campaign.yaml", standin_config(workdir))
    cases = {
        "config outside": ("config file", payload(workdir, configfiles=[str(elsewhere / "campaign.yaml")])),
        "config where Snakemake writes": ("config file", payload(workdir, configfiles=[".snakemake/campaign.yaml"])),
        "Snakefile outside": ("Snakefile", payload(workdir, snakefile=str(tmp_path / "Snakefile"))),
        "Snakefile not the workflow's": ("Snakefile", payload(workdir, snakefile=str(workdir / "evil.smk"))),
    }
    (workdir / "evil.smk").write_text(SNAKEFILE.read_text())
    (tmp_path / "Snakefile").write_text(SNAKEFILE.read_text())
    workers_allow = [str(workdir), str(REPO)]
    for name, (what, args) in cases.items():
        path = args["snakefile"] if what == "Snakefile" else str(workdir / args["configfiles"][0])
        refusal = code_file_refusal(path, what, workers_allow, written_by_tools(str(workdir)))
        assert refusal is not None, name
        with pytest.raises(TaskRefused) as refused:
            validate_task(args, workers_allow)
        assert str(refused.value) == refusal, name
    also = [*workers_allow, str(tmp_path)]
    config_outside = cases["config outside"][1]
    assert code_file_refusal(str(elsewhere / "campaign.yaml"), "config file", also, []) is None
    validate_task(config_outside, also)
