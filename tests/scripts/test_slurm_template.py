"""The Slurm templates, run as plain scripts under the variables sbatch would give them, with stand-ins for `srun` and
`scontrol`: what a real Slurm cannot show cheaply or at all here (tests/scripts/test_slurm_cluster.py runs them on one).

scripts/slurm/worker.sbatch: one worker per node with the node's GPUs, the queue URL and token from the
environment, logs per node, the token on no command line and in no log, resources per GPU that sbatch's own
variables override. scripts/slurm/submitter.sbatch: snakemake as a CPU job that, at its time limit, requeues itself
without cancelling anything, and whose next run attaches to the same tasks (no batch runs twice); INT stops the
campaign as Ctrl-C does; one submitter per workflow directory."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import SNAKEFILE, standin_config, write_config
from labtasker_testkit import REPO, all_tasks, client, job_step_runs, labtasker_url, queue, wait_for, workers

TEMPLATE = REPO / "scripts" / "slurm" / "worker.sbatch"
SUBMITTER = REPO / "scripts" / "slurm" / "submitter.sbatch"
FAKE_SRUN = """#!/bin/bash
# stand-in for Slurm's srun on one node: drop the options, run the command once
echo "srun $*" >> "$SRUN_CALLS"
while [[ "$1" == --* ]]; do shift; done
exec "$@"
"""


def slurm_env(url: str, queue: str, workdir: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    token_file = tmp_path / "token"
    token_file.write_text(os.environ["LABTASKER_TOKEN"] + "\n")
    token_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "LABTASKER_TOKEN"}
    env.update(
        LABTASKER_URL=url,
        LABTASKER_TOKEN_FILE=str(token_file),
        EVALWF_WORKFLOW_DIR=str(workdir),
        EVALWF_PYTHON=sys.executable,
        EVALWF_LOG_ROOT=str(tmp_path / "logs"),
        EVALWF_IDLE_TIMEOUT="2",
        SNAKEMAKE_LABTASKER_QUEUE=queue,
        PYTHONPATH=str(REPO),
        **extra,
    )
    return env


def directives(template: Path) -> list[str]:
    """The options of a template's #SBATCH lines (sbatch reads them up to the first command)."""
    return [line.split(None, 1)[1] for line in template.read_text().splitlines() if line.startswith("#SBATCH ")]


def fake_command(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(script)
    (bin_dir / name).chmod(0o755)
    return bin_dir


def test_template_is_valid_bash_with_sbatch_directives():
    text = TEMPLATE.read_text()
    assert subprocess.run(["bash", "-n", str(TEMPLATE)]).returncode == 0
    assert "--ntasks-per-node=1" in directives(TEMPLATE) and "LABTASKER_TOKEN" in text
    assert '--url "$LABTASKER_URL"' in text and "--token" not in text


def test_worker_resources_are_per_gpu_defaults_that_sbatch_variables_override():
    """#SBATCH lines cannot read variables; sbatch's own (SBATCH_CPUS_PER_GPU, SBATCH_MEM_PER_GPU, SBATCH_PARTITION,
    SBATCH_ACCOUNT) override them, so the defaults must be exactly those options and partition and account must be
    left to them (a fixed one would be every other cluster's wrong one)."""
    options = directives(TEMPLATE)
    assert "--cpus-per-gpu=8" in options and "--mem-per-gpu=32G" in options
    assert not [
        o for o in options if o.startswith(("--cpus-per-task", "-c", "--mem=", "--partition", "-p", "--account", "-A"))
    ]
    text = TEMPLATE.read_text()
    assert all(v in text for v in ("SBATCH_CPUS_PER_GPU", "SBATCH_MEM_PER_GPU", "SBATCH_PARTITION", "SBATCH_ACCOUNT"))


@pytest.mark.parametrize("via_srun", [False, True], ids=["plain", "srun"])
def test_template_starts_one_worker_with_the_node_gpus_and_logs_per_node(labtasker_url, queue, tmp_path, via_srun):
    from labtasker import Client

    with Client(url=labtasker_url, queue=queue) as client:
        client.create_queue(queue)
    workdir = tmp_path / "wf"
    workdir.mkdir()
    extra = {"SLURM_JOB_GPUS": "0,1"}
    if via_srun:
        bin_dir = fake_command(tmp_path / "bin", "srun", FAKE_SRUN)
        extra.update(SLURM_JOB_ID="4242", PATH=f"{bin_dir}:{os.environ['PATH']}", SRUN_CALLS=str(tmp_path / "srun"))
        # what sbatch hands the job for this file's --cpus-per-gpu / --mem-per-gpu, -p and -A from SBATCH_PARTITION /
        # SBATCH_ACCOUNT, and a SBATCH_MEM_PER_NODE that sbatch dropped (it does not mix with --mem-per-gpu)
        extra.update(SLURM_CPUS_PER_GPU="8", SLURM_MEM_PER_GPU="32768", SLURM_JOB_PARTITION="gpu-a100",
                     SLURM_JOB_ACCOUNT="robotics", SBATCH_MEM_PER_NODE="64G")  # fmt: skip
    env = slurm_env(labtasker_url, queue, workdir, tmp_path, **extra)
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    node = socket.gethostname().split(".")[0]
    log_dir = tmp_path / "logs" / ("4242" if via_srun else "local") / node
    out = (log_dir / "worker.out").read_text()
    assert "supervising 2 GPU worker(s)" in out, out  # GPUs 0 and 1 of this node, one worker process each
    assert "idle for" in out
    assert {p.name for p in log_dir.iterdir()} >= {"gpu0", "gpu1", "worker.out"}
    token = os.environ["LABTASKER_TOKEN"]
    assert token not in out + done.stdout + done.stderr
    assert all(token not in p.read_text(errors="replace") for p in log_dir.rglob("*") if p.is_file())
    if via_srun:
        assert (tmp_path / "srun").read_text().startswith("srun --ntasks-per-node=1")
        assert "job 4242: partition gpu-a100, account robotics, 8 CPUs and 32768 MB per GPU" in done.stdout
        assert "SBATCH_MEM_PER_NODE / SBATCH_MEM_PER_CPU were ignored" in done.stderr
        assert "set SBATCH_MEM_PER_GPU instead" in done.stderr


def test_template_refuses_to_start_without_a_queue_url(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("LABTASKER_URL",)}
    env["EVALWF_WORKFLOW_DIR"] = str(tmp_path)
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "export LABTASKER_URL" in done.stderr


# --- the submitter ---------------------------------------------------------------------------------------------

FAKE_SCONTROL = """#!/bin/bash
# stand-in for Slurm's scontrol: record the call (a real `scontrol requeue` ends this job and queues it again)
echo "scontrol $*" >> "$SCONTROL_CALLS"
"""


def submitter_env(url: str, queue: str, workdir: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    """What the submitter job sees: the worker's variables, its profile, a stand-in scontrol, job 4242."""
    bin_dir = fake_command(tmp_path / "bin", "scontrol", FAKE_SCONTROL)
    return slurm_env(
        url, queue, workdir, tmp_path,
        EVALWF_PROFILE=str(REPO / "profiles" / "labtasker"), SLURM_JOB_ID="4242",
        PATH=f"{bin_dir}:{os.environ['PATH']}", SCONTROL_CALLS=str(tmp_path / "scontrol"), **extra,
    )  # fmt: skip


@contextlib.contextmanager
def reaped(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """Kill what is left of a submitter the test gave up on: the script and its snakemake, which runs in a process
    group of its own (`set -m`), so neither a signal to the script nor to its group reaches it."""
    try:
        yield process
    finally:
        if process.poll() is None:
            for child in psutil.Process(process.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            process.kill()
            process.wait()


def submitter_campaign(workdir: Path, **standin: object) -> list[str]:
    """A small stand-in campaign in `workdir`; returns the snakemake arguments given to the submitter template."""
    workdir.mkdir()
    config = standin_config(
        workdir, standin={"suites": {"alpha": ["reach", "push"]}, "episodes_per_task": 6, **standin}
    )
    configfile = write_config(workdir / "campaign.yaml", config)
    # the repository's Snakefile, which the workers allow too (as LABTASKER_PROFILE says for the other tests)
    return ["--snakefile", str(SNAKEFILE), "--configfile", str(configfile), "--labtasker-allow-workflow", str(REPO)]


def test_submitter_template_is_a_requeueable_cpu_job():
    options = directives(SUBMITTER)
    assert subprocess.run(["bash", "-n", str(SUBMITTER)]).returncode == 0
    assert "--requeue" in options and "--open-mode=append" in options  # the requeued run appends to the same log
    assert "--signal=B:USR1@600" in options  # the batch shell only: snakemake must not see it
    assert not [o for o in options if "gpu" in o or "gres" in o]
    assert "--token" not in SUBMITTER.read_text()


def test_submitter_refuses_to_start_without_a_shared_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LABTASKER_URL"}
    env["EVALWF_WORKFLOW_DIR"] = str(tmp_path)
    done = subprocess.run(["bash", str(SUBMITTER)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "export LABTASKER_URL (the shared Labtasker server of the campaign" in done.stderr


def test_a_second_submitter_of_the_same_workflow_directory_exits_naming_the_first(labtasker_url, queue, tmp_path):
    workdir = tmp_path / "wf"
    arguments = submitter_campaign(workdir)
    lock = workdir / ".snakemake" / "labtasker" / "submitter.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a running submitter holds
        lock.write_text("job 4141 on node7 since 2026-01-01T00:00:00Z\n")
        env = submitter_env(labtasker_url, queue, workdir, tmp_path, EVALWF_SUBMITTER_LOCK_WAIT_S="0")
        done = subprocess.run(["bash", str(SUBMITTER), *arguments], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 75, done.stdout + done.stderr
    assert "another submitter runs for" in done.stderr and "job 4141 on node7" in done.stderr
    assert not (workdir / "results").exists()  # snakemake never started


@pytest.mark.slow
def test_submitter_requeued_at_its_time_limit_attaches_to_the_same_tasks_and_runs_nothing_twice(
    labtasker_url, queue, client, workers, tmp_path
):
    workdir = tmp_path / "wf"
    arguments = [*submitter_campaign(workdir), "--labtasker-queue", queue]
    env = submitter_env(labtasker_url, queue, workdir, tmp_path)
    workers.start("w", allow=[workdir, REPO])
    with open(tmp_path / "first.out", "wb") as out:
        first = subprocess.Popen(["bash", str(SUBMITTER), *arguments], env=env, stdout=out, stderr=subprocess.STDOUT)
    with reaped(first):
        batches = workdir / "results" / "t" / "standin" / "batches"
        wait_for(lambda: list(batches.rglob("*.json")), 180, "a finished batch")
        first.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@600 sends the batch shell before the time limit
        assert first.wait(60) == 0
    log = (tmp_path / "first.out").read_text()
    assert "requeued: the next run of this job attaches to the same tasks" in log, log[-3000:]
    assert (tmp_path / "scontrol").read_text() == "scontrol requeue 4242\n"
    before = {t.id: t.status for t in all_tasks(client)}
    assert before and "cancelled" not in before.values(), before  # the hand-over cancelled nothing
    assert set(before.values()) != {"succeeded"}, "the campaign finished before the hand-over: nothing was tested"

    with open(tmp_path / "again.out", "wb") as out:  # the requeued run of job 4242
        again = subprocess.Popen(
            ["bash", str(SUBMITTER), *arguments], env={**env, "SLURM_RESTART_COUNT": "1"}, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    with reaped(again):
        assert again.wait(600) == 0, (tmp_path / "again.out").read_text()[-6000:]
    assert "restart 1" in (tmp_path / "again.out").read_text()
    tasks = all_tasks(client)
    assert {t.status for t in tasks} == {"succeeded"} and set(before) <= {t.id for t in tasks}
    runs = {t.name: job_step_runs(workdir, t.id) for t in tasks}
    assert set(runs.values()) == {1}, f"every job evaluated exactly once; job-step runs per task: {runs}"


def start_submitter_without_workers(labtasker_url: str, queue: str, tmp_path: Path) -> subprocess.Popen:
    """The submitter template on a stand-in campaign, its output in tmp_path/submitter.out; with no worker, every
    task it submits stays queued."""
    workdir = tmp_path / "wf"
    arguments = [*submitter_campaign(workdir), "--labtasker-queue", queue]
    env = submitter_env(labtasker_url, queue, workdir, tmp_path)
    with open(tmp_path / "submitter.out", "wb") as out:
        return subprocess.Popen(["bash", str(SUBMITTER), *arguments], env=env, stdout=out, stderr=subprocess.STDOUT)


def test_int_to_the_submitter_stops_the_campaign_like_ctrl_c(labtasker_url, queue, client, tmp_path):
    """`scancel --batch --signal=INT <job>`: the template hands the INT to snakemake, whose Ctrl-C cancels the queued
    tasks; nothing is requeued."""
    submitter = start_submitter_without_workers(labtasker_url, queue, tmp_path)
    with reaped(submitter):
        wait_for(lambda: all_tasks(client), 120, "queued tasks")
        submitter.send_signal(signal.SIGINT)
        assert submitter.wait(60) != 0
    log = (tmp_path / "submitter.out").read_text()
    assert "Ctrl-C: cancelled" in log, log[-3000:]
    assert {t.status for t in all_tasks(client)} == {"cancelled"}
    assert not (tmp_path / "scontrol").exists()


def test_a_plain_scancel_s_sigterm_leaves_the_tasks_queued(labtasker_url, queue, client, tmp_path):
    """A plain `scancel <job>` (or a preemption) sends SIGTERM to snakemake itself: the template starts it with TERM
    ignored, so SIGTERM does not cancel as Ctrl-C does there; the tasks stay queued for the next job."""
    submitter = start_submitter_without_workers(labtasker_url, queue, tmp_path)
    with reaped(submitter):
        wait_for(lambda: all_tasks(client), 120, "queued tasks")
        (snakemake,) = [p for p in psutil.Process(submitter.pid).children() if "snakemake" in " ".join(p.cmdline())]
        snakemake.send_signal(signal.SIGTERM)
        with pytest.raises(psutil.TimeoutExpired):
            snakemake.wait(5)  # Snakemake's own SIGTERM: it waits for its jobs (Slurm's SIGKILL follows)
        snakemake.kill()
        submitter.wait(60)
    log = (tmp_path / "submitter.out").read_text()
    assert "SIGTERM: cancelled" not in log, log[-3000:]
    assert {t.status for t in all_tasks(client)} == {"pending"}


def test_a_node_without_gpu_information_is_refused_naming_what_to_pass(tmp_path):
    """With no Slurm GPU variable, no CUDA_VISIBLE_DEVICES and no GPU nvidia-smi lists, the template ran
    a worker "on GPU 0" without a word; it is refused naming --gres=gpu:N and EVALWF_GPUS."""
    bin_dir = fake_command(tmp_path / "bin", "nvidia-smi", "#!/bin/bash\nexit 0\n")  # a node that lists no GPU
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_VISIBLE", "EVALWF_GPUS"))}
    env.update(LABTASKER_URL="https://127.0.0.1:9", LABTASKER_TOKEN="x", EVALWF_WORKFLOW_DIR=str(tmp_path),
               EVALWF_LOG_ROOT=str(tmp_path / "logs"), PATH=f"{bin_dir}:{os.environ['PATH']}")  # fmt: skip
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no GPU information" in done.stderr and "--gres=gpu:N" in done.stderr and "EVALWF_GPUS" in done.stderr


def test_a_token_file_others_can_read_is_refused_by_the_worker_the_template_starts(labtasker_url, queue, tmp_path):
    """The template hands LABTASKER_TOKEN_FILE to the worker, whose resolver refuses a file other users can read
    (the template used to read any file itself, silently)."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    env = slurm_env(labtasker_url, queue, workdir, tmp_path, SLURM_JOB_GPUS="0")
    Path(env["LABTASKER_TOKEN_FILE"]).chmod(0o644)
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=120)
    out = next((tmp_path / "logs" / "local").glob("*/worker.out")).read_text()
    assert done.returncode != 0, out
    assert env["LABTASKER_TOKEN_FILE"] in out and "chmod 600" in out, out
    assert os.environ["LABTASKER_TOKEN"] not in out + done.stdout + done.stderr


def test_gpus_slurm_confines_are_given_to_the_workers_as_the_job_sees_them(tmp_path):
    """Where Slurm confines a job to its GPUs (cgroup.conf ConstrainDevices=yes) it numbers CUDA_VISIBLE_DEVICES
    from 0, while SLURM_JOB_GPUS / SLURM_STEP_GPUS keep the node's numbers: a worker given those would run its job
    steps "on GPU 2" of a job that sees two GPUs, 0 and 1, and find none. (The test Slurm has no cgroups: its two
    numberings agree, so this runs the template as a plain script with the variables such a job gets.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_VISIBLE", "EVALWF_GPUS"))}
    env.update(LABTASKER_URL="https://127.0.0.1:9", LABTASKER_TOKEN="x", EVALWF_WORKFLOW_DIR=str(tmp_path),
               EVALWF_LOG_ROOT=str(tmp_path / "logs"), EVALWF_PYTHON="/bin/false",  # the worker's line is enough
               SLURM_JOB_GPUS="2,3", SLURM_STEP_GPUS="2,3", CUDA_VISIBLE_DEVICES="0,1")  # fmt: skip
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=30)
    assert "worker for GPUs 0,1 " in done.stdout, done.stdout + done.stderr


def test_the_campaign_config_files_named_in_evalwf_configfiles_reach_the_worker(tmp_path):
    """EVALWF_CONFIGFILES (as the submitter's --configfile, relative to the workflow directory): the worker is given
    them, so it checks its node and starts the policy server before its first batch; unset, nothing is added."""
    args_file = tmp_path / "argv"
    python = fake_command(tmp_path / "bin", "python", f'#!/bin/sh\necho "$PWD $*" > {args_file}\n') / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_VISIBLE", "EVALWF_"))}
    env.update(LABTASKER_URL="https://127.0.0.1:9", LABTASKER_TOKEN="x", EVALWF_WORKFLOW_DIR=str(tmp_path),
               EVALWF_LOG_ROOT=str(tmp_path / "logs"), EVALWF_PYTHON=str(python), EVALWF_GPUS="0",
               EVALWF_CONFIGFILES="config/libero.yaml  my-policy.yaml")  # fmt: skip
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    argv = args_file.read_text().split()
    assert argv[0] == str(tmp_path) and argv[-3:] == ["--configfile", "config/libero.yaml", "my-policy.yaml"], argv
    del env["EVALWF_CONFIGFILES"]
    done = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "--configfile" not in args_file.read_text(), done.stdout + done.stderr
