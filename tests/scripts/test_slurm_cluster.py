"""The Slurm templates, unchanged, on a real single-node Slurm 22.05 (tests/slurmkit.py: slurmctld, slurmd and munge
started here, four GPUs declared as generic resources).

One stand-in campaign (two tasks, four batches) runs through a Labtasker server reached by URL, its token read from
an owner-only file, while Slurm does what it does on a cluster:
- worker job 1 (`--gres=gpu:2`) starts one worker per GPU Slurm assigned; a second worker job asking three GPUs
  waits PENDING (Resources) while the first holds two of the four;
- `scancel --batch --signal=TERM` (what `--signal=B:TERM@120` sends at the time limit) reaches the workers through
  srun, and they hand their running batches back uncharged; the waiting worker job then starts;
- `scontrol requeue` of the submitter job (a CPU job) kills its snakemake mid-campaign, and the requeued run attaches
  to the same tasks: every finished batch adopted, no job step run twice; that run, given the USR1 its time limit
  would bring, requeues itself, and its third run completes the campaign;
- the results equal the same campaign's run on Snakemake's local executor (the shared finished stand-in run).

The tests below each check one of these on the one campaign (module fixture `campaign`)."""

# ruff: noqa: F401, F811  (pytest fixtures imported from the kits are used as parameters)
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from conftest import FinishedRun, finished_run_config, finished_standin_run, write_config
from labtasker_testkit import REPO, all_tasks, cmdlines, job_step_runs, labtasker_url, wait_for
from slurmkit import GPUS, Slurm, slurm

pytestmark = pytest.mark.slow

WORKER = REPO / "scripts" / "slurm" / "worker.sbatch"
SUBMITTER = REPO / "scripts" / "slurm" / "submitter.sbatch"
QUEUE = "slurm-cluster"
EPISODE_KEYS = ("index", "seed", "setup", "steps", "success", "extra")


@dataclass
class Campaign:
    """What the scenario saw, for the tests to check."""

    workdir: Path
    token: str = field(repr=False)
    first_workers: str  # job ids
    second_workers: str
    submitter: str
    pending_reason: str = ""  # the second worker job's, while the first held its GPUs
    handed_back: dict[str, tuple[str, int]] = field(default_factory=dict)  # task id -> (status, attempt) just after
    all_handed_back: set[str] = field(default_factory=set)  # every task the first worker job handed back
    first_end: dict[str, str] = field(default_factory=dict)  # scontrol fields of the first worker job, ended
    second_end: dict[str, str] = field(default_factory=dict)
    submitter_end: dict[str, str] = field(default_factory=dict)
    token_on_a_command_line: bool = True  # in any process's, mid-campaign
    survivors: list[str] = field(default_factory=list)  # the campaign's snakemake processes once it was requeued
    finished_before_requeue: set[str] = field(default_factory=set)  # batch files
    tasks: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (name, status) at the end
    seconds: dict[str, float] = field(default_factory=dict)

    def log(self, job: str, kind: str) -> str:
        return (self.workdir / f"evalwf-{kind}-{job}.out").read_text(errors="replace")

    def node_logs(self, job: str) -> list[Path]:
        root = self.workdir / ".snakemake" / "labtasker" / "slurm" / job
        return sorted(p for p in root.rglob("*") if p.is_file())


def workflow_directory(workdir: Path) -> Path:
    """A lab's workflow directory: its own copy of workflow/ (the workers run only an allowed directory's
    workflow/Snakefile) and the campaign's config, which is the shared finished run's without its third task."""
    shutil.copytree(REPO / "workflow", workdir / "workflow")
    config = finished_run_config(workdir)
    section = config["benchmarks"]["standin"]
    # two tasks of 5 episodes in batches of 3: four batches; no videos (not results-defining); slow enough steps that
    # a batch still runs when the workers are stopped (also not results-defining)
    section.update(suites={"alpha": ["reach", "push"]}, record_video="none", step_time_s={"default": 0.15})
    return write_config(workdir / "campaign.yaml", config)


def job_env(url: str, token_file: Path, workdir: Path, **extra: str) -> dict[str, str]:
    """What the user exports before sbatch (docs/cluster.md): the token only as a file's name."""
    env = {k: v for k, v in os.environ.items() if k != "LABTASKER_TOKEN" and not k.startswith(("SLURM_", "SBATCH_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        LABTASKER_URL=url, LABTASKER_TOKEN_FILE=str(token_file), EVALWF_WORKFLOW_DIR=str(workdir),
        EVALWF_PYTHON=sys.executable, PYTHONPATH=str(REPO), SNAKEMAKE_LABTASKER_QUEUE=QUEUE, **extra,
    )  # fmt: skip
    return env


def batch_files(workdir: Path) -> set[str]:
    batches = workdir / "results" / "t" / "standin" / "batches"
    return {str(p.relative_to(batches)) for p in batches.rglob("*.json")} if batches.exists() else set()


def running_in(log_root: Path) -> list[str]:
    """Task ids the workers under `log_root` report running (their status.json)."""
    found = []
    for status in log_root.rglob("status.json"):
        try:
            found += json.loads(status.read_text()).get("running", [])
        except (OSError, ValueError):
            pass
    return found


def snakemakes_of(configfile: Path) -> list[str]:
    """The command lines of the snakemake processes of this campaign (any left by a requeued job)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if "snakemake" in line and str(configfile) in line:
            found.append(f"{process.pid}: {line}")
    return found


@pytest.fixture(scope="module")
def campaign(slurm: Slurm, labtasker_url: str, tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    from labtasker import Client

    started = time.monotonic()
    workdir = tmp_path_factory.mktemp("slurm-campaign")
    configfile = workflow_directory(workdir)
    token = os.environ["LABTASKER_TOKEN"]
    token_file = workdir.parent / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    env = job_env(labtasker_url, token_file, workdir)
    with Client(url=labtasker_url, queue=QUEUE) as client:
        client.create_queue(QUEUE)
        first = slurm.sbatch("--gres=gpu:2", WORKER, env=env, cwd=workdir)
        profile = str(REPO / "profiles" / "labtasker")
        submitter = slurm.sbatch(SUBMITTER, "--configfile", configfile, env={**env, "EVALWF_PROFILE": profile},
                                 cwd=workdir)  # fmt: skip
        slurm.wait_state(first, {"RUNNING"}, 30)
        slurm.wait_state(submitter, {"RUNNING"}, 30)  # before a job that must wait: none behind it would start
        # a worker job asking more GPUs than are free waits (checked once the campaign is under way)
        second = slurm.sbatch("--gres=gpu:3", WORKER, env={**env, "EVALWF_IDLE_TIMEOUT": "3"}, cwd=workdir)
        seen = Campaign(workdir, token, first, second, submitter)
        first_logs = workdir / ".snakemake" / "labtasker" / "slurm" / first
        # the TERM must find a batch with most of its episodes ahead: one claimed after the first batch finished
        # (the first wave's other batch may be ending by then, and a TERM it outruns tests nothing)
        first_wave: set[str] = set()

        def fresh_batch() -> list[str]:
            if not batch_files(workdir):
                first_wave.update(running_in(first_logs))  # running before any batch was written
                return []
            return [task for task in running_in(first_logs) if task not in first_wave]

        wait_for(fresh_batch, 120, "a finished batch and one claimed after it")
        seen.seconds["first batch"] = time.monotonic() - started
        seen.token_on_a_command_line = any(token.encode() in line for line in cmdlines())
        fields = slurm.job(second)
        seen.pending_reason = f"{fields['JobState']} {fields['Reason']}"

        # the time limit's TERM to the batch shell (srun): the workers hand their running batches back
        running = running_in(first_logs)
        slurm.run("scancel", "--batch", "--signal=TERM", first)
        out = lambda: "\n".join(p.read_text(errors="replace") for p in first_logs.rglob("worker.out"))  # noqa: E731

        def settled() -> bool:  # each running batch handed back (its state noted at once) or finished meanwhile
            for task in running:
                if task not in seen.handed_back and f"handed task {task} back" in out():
                    seen.handed_back[task] = (client.get_task(task).status, client.get_task(task).attempt)
            return all(t in seen.handed_back or f"task {t} succeeded" in out() for t in running)

        wait_for(settled, 60, f"the workers to hand back or finish {running}")
        seen.first_end = slurm.wait_state(first, {"COMPLETED", "FAILED", "CANCELLED"}, 60)
        seen.all_handed_back = set(re.findall(r"handed task (\S+) back", out()))  # also those claimed meanwhile

        # the submitter requeued mid-campaign (as a preemption or its time limit does)
        seen.finished_before_requeue = batch_files(workdir)
        slurm.run("scontrol", "requeue", submitter)
        slurm.wait_state(submitter, {"PENDING"}, 60)
        seen.survivors = snakemakes_of(configfile)
        # not Slurm's 2-minute hold of a requeued job; but not in the second of the requeue either, or slurmd takes
        # the new run's credential for the revoked one of the old ("Job credential revoked")
        slurm.run("scontrol", "update", f"JobId={submitter}", "StartTime=now+2")

        # its second run near its time limit (--signal=B:USR1@600): it requeues itself (scontrol requeue in the job)
        slurm.wait_state(submitter, {"RUNNING"}, 60)
        wait_for(lambda: snakemakes_of(configfile), 60, "the second run's snakemake")  # the USR1 trap is set by then
        slurm.run("scancel", "--batch", "--signal=USR1", submitter)
        wait_for(lambda: slurm.job(submitter)["Restarts"] == "2", 60, "the submitter job to requeue itself")
        slurm.wait_state(submitter, {"PENDING"}, 60)
        slurm.run("scontrol", "update", f"JobId={submitter}", "StartTime=now+2")
        seen.submitter_end = slurm.wait_state(submitter, {"COMPLETED", "FAILED", "CANCELLED"}, 240)
        seen.second_end = slurm.wait_state(seen.second_workers, {"COMPLETED", "FAILED", "CANCELLED"}, 60)
        seen.tasks = {t.id: (t.name, t.status) for t in all_tasks(client)}
    seen.seconds["campaign"] = time.monotonic() - started
    return seen


def test_worker_job_runs_one_worker_per_gpu_slurm_assigned_and_logs_what_it_got(campaign: Campaign):
    log = campaign.log(campaign.first_workers, "workers")
    assert f"job {campaign.first_workers}: partition debug" in log, log
    assert "8 CPUs and 32768 MB per GPU" in log, log  # the template's per-GPU defaults, as sbatch gave them
    assert "worker for GPUs 0,1" in log and "1 slot(s) per GPU" in log, log
    out = "".join(p.read_text() for p in campaign.node_logs(campaign.first_workers) if p.name == "worker.out")
    assert "supervising 2 GPU worker(s)" in out, out
    second = campaign.log(campaign.second_workers, "workers")
    assert "worker for GPUs 0,1,2" in second, second


def test_a_worker_job_asking_more_gpus_than_are_free_waits_in_the_queue(campaign: Campaign):
    assert campaign.pending_reason == "PENDING Resources"
    assert campaign.second_end["JobState"] == "COMPLETED", campaign.second_end  # once the first let go, it ran


def test_term_to_the_worker_job_hands_its_running_batches_back_uncharged(campaign: Campaign):
    assert campaign.handed_back, "no batch was running when the worker job got its TERM: nothing was tested"
    assert set(campaign.handed_back.values()) == {("pending", 0)}, campaign.handed_back
    assert (campaign.first_end["JobState"], campaign.first_end["ExitCode"]) == ("COMPLETED", "0:0"), campaign.first_end


def test_a_requeued_submitter_adopts_the_finished_batches_and_runs_nothing_twice(campaign: Campaign):
    """Requeued twice: by `scontrol requeue` (a preemption, an administrator), then by itself at its USR1."""
    assert campaign.submitter_end["JobState"] == "COMPLETED" and campaign.submitter_end["Restarts"] == "2"
    log = campaign.log(campaign.submitter, "submitter")
    assert all(f"restart {n}" in log for n in range(3)) and "snakemake exited with status 0" in log, log[-4000:]
    assert "requeued: the next run of this job attaches to the same tasks" in log, log[-4000:]
    assert not campaign.survivors, "the requeued job's snakemake outlived it (beside the next run)"
    assert campaign.finished_before_requeue, "no batch had finished before the requeue: nothing adopted"
    assert len(batch_files(campaign.workdir)) == 4 > len(campaign.finished_before_requeue)
    assert {status for _, status in campaign.tasks.values()} == {"succeeded"}, campaign.tasks
    runs = {name: job_step_runs(campaign.workdir, task) for task, (name, _) in campaign.tasks.items()}
    handed = {campaign.tasks[t][0] for t in campaign.all_handed_back}
    # each job step ran once, except those the stopped workers handed back (stopped, if started, and run again)
    assert {n: r for n, r in runs.items() if n not in handed} == {n: 1 for n in runs if n not in handed}, runs
    assert all(runs[n] in (1, 2) for n in handed), runs


def episode(record: dict[str, object]) -> dict[str, object]:
    """What an episode's record says of the episode: not its duration, nor the video the local run recorded."""
    fields = {key: record[key] for key in EPISODE_KEYS}
    fields["extra"] = {k: v for k, v in record["extra"].items() if not k.startswith("video")}  # type: ignore[attr-defined]
    return fields


def test_results_equal_the_same_campaign_run_locally(campaign: Campaign, finished_standin_run: FinishedRun):
    here = campaign.workdir / "results" / "t" / "standin" / "batches"
    there = finished_standin_run.benchmark_dir / "batches"
    for name in sorted(batch_files(campaign.workdir)):
        ours, theirs = json.loads((here / name).read_text()), json.loads((there / name).read_text())
        for key in ("manifest_hash", "policy_identity", "success_count", "num_episodes"):
            assert ours[key] == theirs[key], (name, key)
        assert [episode(e) for e in ours["episodes"]] == [episode(e) for e in theirs["episodes"]], name


def test_the_token_is_in_no_job_log_and_no_job_s_command_line(campaign: Campaign, slurm: Slurm):
    logs = [campaign.workdir / f for f in os.listdir(campaign.workdir) if f.startswith("evalwf-")]
    logs += campaign.node_logs(campaign.first_workers) + campaign.node_logs(campaign.second_workers)
    logs += [p for p in slurm.root.rglob("*") if p.is_file()]  # Slurm's logs, and its copy of each job's environment
    assert len(logs) > 6 and [p for p in logs if p.name == "environment"]
    assert not [p for p in logs if campaign.token in p.read_text(errors="replace")]
    assert not campaign.token_on_a_command_line
    for job in (campaign.first_workers, campaign.second_workers, campaign.submitter):
        assert campaign.token not in slurm.run("scontrol", "show", "job", job)


def test_the_worker_template_s_resources_follow_sbatch_s_variables_as_its_header_says(slurm: Slurm, tmp_path):
    """Each resource variable and option the template's header documents, tried once on this sbatch. The worker
    itself is /bin/false here: the job's log line about what it received is written before it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "LABTASKER_"))}
    env.update(LABTASKER_URL="http://127.0.0.1:9", LABTASKER_TOKEN_FILE=str(tmp_path / "unused"),
               EVALWF_WORKFLOW_DIR=str(tmp_path), EVALWF_PYTHON="/bin/false")  # fmt: skip
    overrides = dict(SBATCH_CPUS_PER_GPU="4", SBATCH_MEM_PER_GPU="8G", SBATCH_PARTITION="debug",
                     SBATCH_ACCOUNT="robotics", SBATCH_TIMELIMIT="00:10:00", SBATCH_GRES="gpu:1",
                     SBATCH_CPUS_PER_TASK="3")  # fmt: skip
    job = slurm.sbatch(WORKER, env={**env, **overrides}, cwd=tmp_path)
    fields = slurm.wait_state(job, {"COMPLETED", "FAILED"}, 60)
    assert fields["TRES"].startswith("cpu=4,mem=8G,") and fields["TresPerNode"] == "gres:gpu:1", fields
    assert (fields["Partition"], fields["Account"], fields["TimeLimit"]) == ("debug", "robotics", "00:10:00"), fields
    log = (tmp_path / f"evalwf-workers-{job}.out").read_text()
    assert f"job {job}: partition debug, account robotics, 4 CPUs and 8192 MB per GPU, GPUs 0," in log, log
    assert "SBATCH_CPUS_PER_TASK is not a Slurm variable" in log, log

    dropped = slurm.sbatch(WORKER, env={**env, "SBATCH_MEM_PER_NODE": "16G", "SBATCH_GRES": "gpu:1"}, cwd=tmp_path)
    fields = slurm.wait_state(dropped, {"COMPLETED", "FAILED"}, 60)
    assert fields["TRES"].startswith("cpu=8,mem=32G,"), fields  # the template's defaults: the variable was dropped
    assert (
        "SBATCH_MEM_PER_NODE / SBATCH_MEM_PER_CPU were ignored"
        in (tmp_path / f"evalwf-workers-{dropped}.out").read_text()
    )
    refused = [
        (["--mem=16G"], {}),
        ([], {"SBATCH_MEM_PER_NODE": "16G", "SBATCH_MEM_PER_GPU": "8G"}),
    ]
    for options, variables in refused:
        done = subprocess.run(["sbatch", *options, str(WORKER)], env=slurm.env({**env, **variables}), cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode != 0 and "mutually exclusive" in done.stderr, (options, variables, done.stderr)
