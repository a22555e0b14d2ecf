"""Queue access is not shell access (DESIGN invariant 6): each attack of an attacker with queue access is refused
and logged; a server given by URL requires its token; tokens never show in payloads, command lines, logs or
results."""

# ruff: noqa: F401, F811  (pytest fixtures imported from labtasker_testkit are used as parameters)
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SNAKEFILE, run_snakemake, standin_config, two_benchmark_config, write_config
from labtasker_testkit import (
    LABTASKER_PROFILE,
    REPO,
    all_tasks,
    client,
    cmdlines,
    job_step_runs,
    labtasker_url,
    queue,
    wait_for,
    workers,
)
from policy_stranger import ONE_SHOT, stranger_on
from taskkit import standin_batch_task

from evalwf.contract import campaign_key
from evalwf.contract.task_payload import payload_campaign
from evalwf.plan.config import load_config
from evalwf.worker.job_payload import FIXED_JOB_STEP_OPTIONS, NotForThisWorker, TaskRefused, validate_task
from snakemake_executor_plugin_labtasker.task_identity import job_step_fields

PWNED = "/tmp/evalwf-trust-pwned"
BATCH = "{workdir}/results/{run}/standin/batches/alpha/reach/0000-2.json"  # a batch the stand-in campaign plans


def campaign(workdir: Path, **section) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    return write_config(workdir / "campaign.yaml", standin_config(workdir, standin=section or {}))


def payload(workdir: Path, **changes: object) -> dict[str, object]:
    """What the plugin submits for one batch of the stand-in campaign in `workdir` (tests/taskkit.py), waiting for a
    file of Snakemake's as a job step does."""
    return standin_batch_task(workdir, **{"wait_for_files": [".snakemake/tmp.abc"], **changes})


def allowed(workdir: Path) -> list[str]:
    return [str(workdir), str(REPO)]


def manifest_job(workdir: Path, run: str = "t", **overrides) -> dict:
    """A payload for the manifest job of task alpha/reach of the stand-in campaign in `workdir`, as of `run`."""
    from evalwf.plan.campaign import Campaign

    payload(workdir)  # writes campaign.yaml
    plan = Campaign(load_config(workdir / "campaign.yaml")).task_plan("standin", "alpha", "reach")
    wildcards = {"run": run, "benchmark": "standin", "scope": plan.scope, "task": "reach", "digest": plan.manifest_hash}
    output = plan.manifest_path.replace("/results/t/", f"/results/{run}/")
    args = payload(
        workdir,
        rules=["plan_manifest"],
        wildcards=[wildcards],
        target_jobs=["plan_manifest:" + ",".join(f"{k}={v}" for k, v in wildcards.items())],
        wait_for_files=[],
        outputs=[output],
        policy_identity=None,
    )
    args.update(overrides)
    return args


def plant(path: Path, config: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(write_config(path, config))


def planted_config(workdir: Path) -> str:
    """A config file that jobs' results directory holds (group-writable on many shared filesystems): its policy
    command is what an attacker with write access there would make workers run."""
    planted = standin_config(workdir)
    planted["policy"]["command"] = f"touch {PWNED} # {{port}}"
    plant(workdir / "results" / "t" / "evil.yaml", planted)
    return "results/t/evil.yaml"


def planted_in_a_shared_directory(workdir: Path) -> str:
    """A config in a directory of the workflow that every user can write (`config/drop/`, mode 0777)."""
    drop = workdir / "config" / "drop"
    drop.mkdir(parents=True, exist_ok=True)
    drop.chmod(0o777)
    planted = standin_config(workdir)
    planted["policy"]["command"] = f"touch {PWNED} # {{port}}"
    plant(drop / "evil.yaml", planted)
    return "config/drop/evil.yaml"


def planted_snakefile(workdir: Path) -> str:
    """Any .smk inside the workflow directory, posing as the Snakefile."""
    path = workdir / "workflow" / "drop" / "evil.smk"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SNAKEFILE.read_text())
    return str(path)


# -- the payload check: unit level ---------------------------------------------------------------------------------


def test_the_worker_builds_the_job_step_from_its_allow_list(tmp_path):
    step = validate_task(payload(tmp_path), allowed(tmp_path))
    argv = step.argv
    assert argv[:5] == [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE)]
    options = {token for token in argv if token.startswith("--")}
    permitted = {o for o in FIXED_JOB_STEP_OPTIONS if o.startswith("--")} | {
        "--snakefile", "--target-jobs", "--allowed-rules", "--force-use-threads", "--attempt", "--latency-wait",
        "--wait-for-files", "--configfiles", "--mode",
    }  # fmt: skip
    assert options <= permitted
    assert argv[argv.index("--configfiles") + 1] == str(tmp_path / "campaign.yaml")
    assert argv[argv.index("--wait-for-files") + 1] == str(tmp_path / ".snakemake" / "tmp.abc")
    assert argv[-2:] == ["--mode", "remote"]
    assert step.policy is not None and step.policy.command == standin_config(tmp_path)["policy"]["command"]


def test_the_worker_forces_a_job_step_only_to_replace_outputs_that_are_not_valid(tmp_path):
    """No --force from the queue: a missing output needs none, a valid one is adopted (JobStep.finished), and one
    that exists but does not validate must be replaced (Snakemake would take it as done)."""
    step = validate_task(payload(tmp_path), allowed(tmp_path))
    assert "--force" not in step.argv and not step.finished()
    assert step.replacing_outputs() == step
    output = Path(step.outputs[0])
    output.parent.mkdir(parents=True)
    output.write_text('{"finished": true}')
    assert not step.finished()
    assert step.replacing_outputs().argv == [*step.argv[:-2], "--force", "--mode", "remote"]


def test_snakemake_s_own_job_step_command_becomes_named_fields(tmp_path):
    """What Snakemake 9.27 puts into a remote job step command (read from a real submitter) turns into fields; the
    options that change what a job computes and cannot travel as files are refused at submission."""
    command = (
        f"{sys.executable} -m snakemake --snakefile '{SNAKEFILE}' --target-jobs 'plan_manifest:run=t,task=reach' "
        "--allowed-rules plan_manifest --cores 'all' --attempt 2 --force-use-threads "
        f"--wait-for-files '{tmp_path}/.snakemake/tmp.bkhaglgs' --force --target-files-omit-workdir-adjustment "
        "--max-inventory-time 0 --retries 0 --nocolor --no-hooks --nolock --ignore-incomplete --rerun-triggers mtime "
        "software-env params code input --conda-frontend 'conda' --shared-fs-usage software-deployment-cache "
        "software-deployment source-cache persistence storage-local-copies input-output sources --latency-wait 30 "
        f"--scheduler 'ilp' --configfiles {tmp_path}/campaign.yaml --default-resources base64//dG1w --mode 'remote'"
    )
    fields = job_step_fields(command, str(tmp_path), [])
    assert fields == {
        "configfiles": ["campaign.yaml"],
        "target_jobs": ["plan_manifest:run=t,task=reach"],
        "local_groupid": None,
        "attempt": 2,
        "latency_wait": 30,
        "wait_for_files": [".snakemake/tmp.bkhaglgs"],
    }
    with pytest.raises(ValueError, match="--config cannot be sent to the workers"):
        job_step_fields(command + " --config results_dir=/tmp/elsewhere", str(tmp_path), [])


def test_a_config_override_is_refused_before_anything_is_written(tmp_path, labtasker_url, queue):
    """`--config run=X` with the labtasker profile is refused when the executor starts: before Snakemake runs the
    local rule that records the campaign (it wrote results/X/campaign.yaml, then refused at the first batch)."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    configfile = write_config(workdir / "campaign.yaml", standin_config(workdir))
    done = run_snakemake(
        workdir, *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url,
        "--labtasker-queue", queue, "--config", "run=elsewhere", check=False, timeout=180,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--config cannot be sent to the workers" in done.stdout + done.stderr, done.stderr[-3000:]
    assert not (workdir / "results").exists(), sorted(str(p) for p in (workdir / "results").rglob("*"))


# What needs the worker's allowed directories or the campaign's plan; what a payload's shape alone refuses (unknown
# keys such as a command or a policy block, options as target jobs, versions, numbers, group ids, rules and wildcards
# that disagree) is tested on TaskPayload.parse in tests/contract/test_task_payload.py.
ATTACKS = {
    "foreign-policy-identity": (lambda p: {"policy_identity": "evil@0123456789abcdef"}, "not the policy of its config"),
    # extra job-step options
    "configfile-outside": (lambda p: {"configfiles": ["/etc/hostname"]}, "not inside an allowed directory"),
    "configfile-escaping": (lambda p: {"configfiles": ["../../etc/hostname"]}, "not inside an allowed directory"),
    "configfile-missing": (lambda p: {"configfiles": ["missing.yaml"]}, "missing.yaml is not a file here"),
    "option-in-target-job": (lambda p: {"target_jobs": ["evaluate_batch:run=t --config=x"]}, None),
    "wait-outside": (lambda p: {"wait_for_files": ["../../etc"]}, "not inside the workflow directory"),
    "snakefile-outside": (lambda p: {"snakefile": "/etc/hostname"}, "Snakefile"),
    "group-id-dash": (lambda p: {"local_groupid": "--config"}, "group job id"),
    # a job of another run, or of no plan: Snakemake would delete its outputs before the rule refuses it
    "another-run": (
        lambda p: {
            "target_jobs": ["evaluate_batch:run=victim,benchmark=standin,suite=alpha,task=reach,batch=0000-2"],
            "wildcards": [
                {"run": "victim", "benchmark": "standin", "suite": "alpha", "task": "reach", "batch": "0000-2"}
            ],
            "outputs": [BATCH.format(workdir=p, run="victim")],
        },
        "names run 'victim', but its config files",
    ),
    "unplanned-batch": (
        lambda p: {
            "target_jobs": ["evaluate_batch:run=t,benchmark=standin,suite=alpha,task=reach,batch=0099-2"],
            "wildcards": [{"run": "t", "benchmark": "standin", "suite": "alpha", "task": "reach", "batch": "0099-2"}],
        },
        "is not a job of the campaign",
    ),
    "outputs-elsewhere": (lambda p: {"outputs": ["/etc/hostname"]}, "not the outputs of its job"),
    "outputs-more": (
        lambda p: {"outputs": [BATCH.format(workdir=p, run="t"), str(p / "results" / "other.json")]},
        "not the outputs of its job",
    ),
    # no policy named for a batch: its job step would start a policy server of its own beside the worker's
    "policy-identity-null": (lambda p: {"policy_identity": None}, "is not the policy of its config files"),
    "no-configfile": (lambda p: {"configfiles": []}, "names no config file"),
    # code only from where code lives
    "configfile-in-results": (lambda p: {"configfiles": [planted_config(p)]}, "which jobs, Snakemake or the queue"),
    "configfile-in-snakemake-state": (
        lambda p: {"configfiles": [plant(p / ".snakemake" / "c.yaml", standin_config(p))]},
        "which jobs, Snakemake or the queue",
    ),
    "configfile-others-can-write": (
        lambda p: {"configfiles": [planted_in_a_shared_directory(p)]},
        "config/drop is writable by other users (mode 0777)",
    ),
    "snakefile-not-the-workflow-s": (
        lambda p: {"snakefile": planted_snakefile(p)},
        "workers run only a workflow's own workflow/Snakefile",
    ),
    "snakefile-in-results": (
        lambda p: {"snakefile": plant(p / "results" / "Snakefile", {})},
        "which jobs, Snakemake or the queue",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_hostile_payloads_are_refused_with_their_reason(tmp_path, attack):
    change, reason = ATTACKS[attack]
    args = payload(tmp_path, **change(tmp_path))
    try:
        step = validate_task(args, allowed(tmp_path))
    except NotForThisWorker:
        pytest.fail("a hostile payload must fail, not be handed back")
    except TaskRefused as error:
        assert reason is None or reason in str(error)
    else:
        # only possible for a value that is one argument of an allow-listed option: never an option itself
        assert reason is None
        assert "--config" not in step.argv and "--config=x" not in step.argv
        assert not [t for t in step.argv if t.startswith("--config") and t != "--configfiles"]


def test_a_task_carries_the_policy_its_config_assigns_to_its_benchmark(tmp_path):
    """A campaign whose benchmarks each have their own policy: the worker starts the policy of the task's
    benchmark, and refuses a task whose identity is a policy of the campaign that does not evaluate that benchmark
    (it would evaluate RoboTwin with the stand-in's policy)."""
    from evalwf.plan.campaign import Campaign

    write_config(tmp_path / "campaign.yaml", two_benchmark_config(tmp_path))
    campaign = Campaign(load_config(tmp_path / "campaign.yaml"))
    identities = {member.benchmarks[0]: member.policy.identity for member in campaign.policy_campaigns()}

    def task(benchmark: str, identity: str) -> dict:
        member = next(m for m in campaign.policy_campaigns() if benchmark in m.benchmarks)
        batch = member.batches(benchmark)[0]
        wildcards = {"run": "t", "policy": member.policy.name, "benchmark": benchmark, "suite": batch.ref.suite}
        wildcards.update(task=batch.ref.task, batch=batch.episodes.label)
        job = "evaluate_batch:" + ",".join(f"{k}={v}" for k, v in wildcards.items())
        output = str(tmp_path / batch.path) if not Path(batch.path).is_absolute() else batch.path
        return payload(tmp_path, target_jobs=[job], wildcards=[wildcards], outputs=[output], policy_identity=identity)

    for benchmark, identity in identities.items():
        assert validate_task(task(benchmark, identity), allowed(tmp_path)).policy.identity == identity
    with pytest.raises(TaskRefused, match=r"is not the policy of its config files .* for its job"):
        validate_task(task("robotwin", identities["standin"]), allowed(tmp_path))
    without_benchmark = payload(
        tmp_path, target_jobs=["evaluate_batch:run=t"], wildcards=[{"run": "t"}], policy_identity=identities["standin"]
    )
    with pytest.raises(TaskRefused, match="is not a job of the campaign"):
        validate_task(without_benchmark, allowed(tmp_path))


def test_another_workflow_directory_is_not_for_this_worker(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    campaign(mine)
    with pytest.raises(NotForThisWorker) as refused:
        validate_task(payload(theirs), allowed(mine))
    assert refused.value.campaign == campaign_key(str(theirs)) and "not allowed" in str(refused.value)


def test_a_campaign_key_is_derived_from_the_workflow_directory_never_believed(tmp_path):
    """A task of a directory this worker does not serve, carrying another campaign's key: refused as the lie it is,
    never handed back under that key (the worker would then stop serving the victim's campaign)."""
    victim, elsewhere = tmp_path / "victim", tmp_path / "elsewhere"
    campaign(victim)
    lie = payload(elsewhere, campaign=campaign_key(str(victim)))
    assert payload_campaign(lie) is None, "the skip list must not take the payload's word"
    with pytest.raises(TaskRefused, match="is not the one of its workflow directory") as refused:
        validate_task(lie, allowed(victim))
    assert not isinstance(refused.value, NotForThisWorker)
    assert payload_campaign(payload(victim)) == campaign_key(str(victim))


def test_a_target_job_of_another_run_is_refused_before_any_job_step(tmp_path):
    """Refused by its campaign's plan, before Snakemake (which removes a job's outputs first) could start."""
    victim_batch = Path(BATCH.format(workdir=tmp_path, run="victim"))
    victim_batch.parent.mkdir(parents=True)
    victim_batch.write_text("{}")
    for crafted in (ATTACKS["another-run"][0](tmp_path), {}):
        args = payload(tmp_path, **crafted) if crafted else manifest_job(tmp_path, run="victim")
        with pytest.raises(TaskRefused, match="names run 'victim'"):
            validate_task(args, allowed(tmp_path))
    assert victim_batch.exists()
    step = validate_task(manifest_job(tmp_path), allowed(tmp_path))  # the same job of its own run is fine
    assert step.policy is None and step.outputs == manifest_job(tmp_path)["outputs"]


def test_config_files_only_from_allowed_config_directories(tmp_path):
    """--allow-config: a config file elsewhere in the workflow directory is refused."""
    args = payload(tmp_path)
    (tmp_path / "config").mkdir()
    with pytest.raises(TaskRefused, match="not inside a config directory this worker allows"):
        validate_task(args, allowed(tmp_path), [str(tmp_path / "config")])
    write_config(tmp_path / "config" / "campaign.yaml", standin_config(tmp_path))
    step = validate_task(
        {**args, "configfiles": ["config/campaign.yaml"]}, allowed(tmp_path), [str(tmp_path / "config")]
    )
    assert step.argv[step.argv.index("--configfiles") + 1] == str(tmp_path / "config" / "campaign.yaml")


# -- the token of a server given by URL (the embedded server has none: tests/queue/test_embedded_server.py) --


@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["no-token", "wrong-token"])
def test_requests_without_the_right_token_are_refused(labtasker_url, token, monkeypatch):
    from labtasker import APIError, Client

    monkeypatch.delenv("LABTASKER_TOKEN", raising=False)
    with Client(url=labtasker_url, queue="q", token=token) as c, pytest.raises(APIError) as refused:
        c.create_queue("q")
    assert refused.value.status_code == 401


# -- real workers -------------------------------------------------------------------------------------------------


def submit(client, args: dict, name: str, max_attempts: int = 1) -> str:
    task = client.submit_task(args, name=name, metadata={"campaign": args.get("campaign")}, max_attempts=max_attempts)
    return task.id


def worker_log(log_dir: Path) -> str:
    return (log_dir / "worker.out").read_text(errors="replace")


@pytest.mark.slow
def test_a_worker_fails_hostile_tasks_with_the_reason_deletes_nothing_and_keeps_serving(
    labtasker_url, queue, client, workers, tmp_path
):
    """Real worker, crafted tasks: each is failed with its reason and logged; none runs a command, deletes another
    run's batch or sealed manifest (a job step removes its target jobs' outputs first), or takes a config from the
    results; one carrying the campaign's key for a directory this worker does not serve leaves the campaign served:
    the campaign's own task that comes after them runs."""
    workdir = tmp_path / "wf"
    campaign(workdir)
    Path(PWNED).unlink(missing_ok=True)
    victims = [
        Path(BATCH.format(workdir=workdir, run="victim")),
        Path(manifest_job(workdir, run="victim")["outputs"][0]),
    ]
    for victim in victims:  # another run's finished batch and sealed manifest, in the same results directory
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_text('{"finished": true}')
    crafted = {
        "policy-command": payload(workdir, policy={"name": "x", "command": f"touch {PWNED} # {{port}}"}),
        "foreign-policy": payload(workdir, policy_identity="evil@0123456789abcdef"),
        "extra-options": payload(workdir, target_jobs=["--config", f"results_dir={tmp_path / 'elsewhere'}"]),
        "configfile-outside": payload(workdir, configfiles=[str(tmp_path / "outside.yaml")]),
        "another-run-batch": payload(workdir, **ATTACKS["another-run"][0](workdir)),
        "another-run-manifest": manifest_job(workdir, run="victim"),
        "planted-config": payload(workdir, configfiles=[planted_config(workdir)]),
        "outputs-elsewhere": payload(workdir, outputs=["/etc/hostname"]),
        "campaign-key-lie": payload(tmp_path / "foreign", campaign=campaign_key(str(workdir))),
    }
    write_config(tmp_path / "outside.yaml", standin_config(tmp_path / "elsewhere"))
    ids = {name: submit(client, args, name) for name, args in crafted.items()}
    served = submit(client, manifest_job(workdir), "the campaign's own manifest job, after the crafted ones")
    _, log_dir = workers.start("w", allow=[workdir, REPO])

    def finished():
        tasks = {t.id: t for t in all_tasks(client)}
        return all(tasks[i].status == "failed" for i in ids.values()) and tasks[served].status == "succeeded" and tasks

    tasks = wait_for(finished, 180, "every hostile task to be failed and the campaign's own one to succeed")
    for name, task_id in ids.items():
        task = tasks[task_id]
        assert task.last_error.type == "TaskRefused", name
        assert task.last_error.message, name
        assert f"refusing task {task_id} (failed with the reason; every worker refuses it)" in worker_log(log_dir), name
    assert not Path(PWNED).exists() and not (tmp_path / "elsewhere").exists()
    assert all(victim.read_text() == '{"finished": true}' for victim in victims), "another run's results were deleted"
    assert "is not served by this worker" not in worker_log(log_dir)


@pytest.mark.slow
def test_a_task_naming_a_finished_valid_batch_is_adopted_never_evaluated_again(
    labtasker_url, queue, client, workers, tmp_path
):
    """Anyone with queue access can name a planned job: one whose outputs exist and validate is reported done
    without a job step (no --force on the worker's side): the batch file keeps its bytes and mtime."""
    workdir = tmp_path / "wf"
    campaign(workdir, suites={"alpha": ["reach"]}, episodes_per_task=2, max_steps=5)
    _, log_dir = workers.start("w", allow=[workdir, REPO])
    batch_job = payload(workdir, wait_for_files=[])
    first = [submit(client, manifest_job(workdir), "manifest"), submit(client, batch_job, "batch")]
    wait_for(lambda: all(client.get_task(i).status == "succeeded" for i in first), 120, "the campaign's batch")
    batch = Path(batch_job["outputs"][0])
    before = (batch.read_bytes(), batch.stat().st_mtime_ns)
    crafted = submit(client, {**batch_job, "attempt": 2}, "the same batch, queued again")
    wait_for(lambda: client.get_task(crafted).status in ("succeeded", "failed"), 120, "the crafted task")
    task = client.get_task(crafted)
    assert task.status == "succeeded" and task.result.get("adopted"), (task.status, task.result)
    assert (batch.read_bytes(), batch.stat().st_mtime_ns) == before, "the finished batch was evaluated again"
    assert job_step_runs(workdir, crafted) == 0
    assert f"task {crafted}: its outputs exist and are valid; adopted" in worker_log(log_dir)


@pytest.mark.slow
def test_a_stranger_on_the_port_of_the_worker_s_dead_policy_server_gets_no_observation(
    labtasker_url, queue, client, workers, tmp_path
):
    """The worker's policy server answers its readiness check and dies; a stranger (started here, not by the
    worker) takes its port before the job step connects: the job step refuses it before sending any observation,
    the task fails naming why, and no batch is recorded."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    server = tmp_path / "one_shot.py"
    server.write_text(ONE_SHOT)
    config = standin_config(workdir, standin={"suites": {"alpha": ["reach"]}, "episodes_per_task": 2})
    config["policy"]["command"] = f"{{python}} {server} --port {{port}}"
    write_config(workdir / "campaign.yaml", config)
    _, log_dir = workers.start("w", allow=[workdir, REPO])
    manifest = submit(client, manifest_job(workdir), "manifest")
    wait_for(lambda: client.get_task(manifest).status == "succeeded", 120, "the manifest")
    batch_job = payload(workdir, wait_for_files=[])
    batch = submit(client, batch_job, "batch")
    ready = wait_for(lambda: re.search(r"ready at ws://127\.0\.0\.1:(\d+)", worker_log(log_dir)), 120, "the server")
    received = tmp_path / "received"
    stranger = stranger_on(int(ready.group(1)), received)
    try:
        wait_for(lambda: client.get_task(batch).status in ("succeeded", "failed"), 120, "the batch")
    finally:
        stranger.kill()
        stranger.wait()
    task = client.get_task(batch)
    assert task.status == "failed", task.result
    assert "is not the one this worker started" in task.last_error.message, task.last_error.message
    assert not received.exists(), "an observation reached the stranger"
    assert not Path(batch_job["outputs"][0]).exists(), "a batch was recorded from a stranger's actions"


@pytest.mark.slow
def test_a_task_of_another_workflow_goes_back_uncharged_and_its_campaign_is_skipped(
    labtasker_url, queue, client, workers, tmp_path
):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    campaign(mine)
    campaign(theirs)
    ids = [submit(client, payload(theirs, attempt=i + 1), f"theirs-{i}", max_attempts=1) for i in range(3)]
    process, log_dir = workers.start("w", allow=[mine, REPO])
    wait_for(lambda: worker_log(log_dir).count("handed task") >= 4, 60, "hand-backs")
    text = worker_log(log_dir)
    assert text.count("is not served by this worker: its tasks are handed back from now on") == 1
    assert "not allowed on this worker" in text
    time.sleep(2)
    for task in all_tasks(client):
        assert (task.status, task.attempt) in {("pending", 0), ("running", 1)}, (task.id, task.status)
    # the skipped campaign is handed back without being checked again, and with a pause between claims
    assert text.count("not allowed on this worker") == 1
    assert process.poll() is None
    # a worker that IS allowed there runs them: nothing was charged
    assert {t.id for t in all_tasks(client)} == set(ids)


@pytest.mark.slow
def test_handing_back_tasks_of_other_workflows_is_no_work_for_the_idle_timeout(
    labtasker_url, queue, client, workers, tmp_path
):
    """A worker whose queue only ever holds other workflows' tasks is idle: --idle-timeout ends it even while new
    foreign campaigns keep arriving (each one's first hand-back used to count as a second of work)."""
    mine = tmp_path / "mine"
    campaign(mine)
    process, log_dir = workers.start("w", allow=[mine, REPO], extra=["--idle-timeout", "3"])
    for index in range(24):  # a new foreign campaign every second, for longer than the idle timeout many times
        if process.poll() is not None:
            break
        submit(client, payload(tmp_path / f"theirs-{index}"), f"theirs-{index}")
        time.sleep(1.0)
    assert process.poll() is not None, "the worker never went idle while handing back other workflows' tasks"
    assert process.wait(30) == 0
    text = worker_log(log_dir)
    assert "(--idle-timeout 3); stopping" in text and "not allowed on this worker" in text
    for task in all_tasks(client):  # nothing was charged
        assert (task.status, task.attempt) == ("pending", 0), (task.id, task.status, task.attempt)


@pytest.mark.slow
@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["no-token", "wrong-token"])
def test_a_worker_without_the_right_token_is_refused(labtasker_url, queue, workers, tmp_path, token):
    env = dict(os.environ)
    env.pop("LABTASKER_TOKEN", None)
    if token:
        env["LABTASKER_TOKEN"] = token
    workdir = tmp_path / "wf"
    campaign(workdir)
    process, log_dir = workers.start("w", allow=[workdir, REPO], env=env)
    # Workers.start merges os.environ: take the token out for real
    process.kill()
    process.wait()
    argv = [
        sys.executable, "-m", "evalwf.worker.main", "--gpus", "0", "--queue", queue, "--url", labtasker_url,
        "--allow-workflow", str(workdir), "--log-dir", str(log_dir),
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "refused this worker: its token is missing or wrong" in done.stdout + done.stderr


ONE_BATCH = {"suites": {"alpha": ["reach"]}, "episodes_per_task": 2, "batch_size": 2, "max_steps": 20}


@pytest.mark.slow
def test_the_token_never_shows_in_payloads_command_lines_logs_or_results(
    labtasker_url, queue, client, workers, tmp_path
):
    token = os.environ["LABTASKER_TOKEN"].encode()
    workdir = tmp_path / "wf"
    configfile = campaign(workdir, **ONE_BATCH)
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        *LABTASKER_PROFILE, "--configfile", str(configfile), "--labtasker-url", labtasker_url,
        "--labtasker-queue", queue,
    ]  # fmt: skip
    _, log_dir = workers.start("w", allow=[workdir, REPO])
    seen = 0
    with open(tmp_path / "snakemake.log", "wb") as out:
        submitter = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        while submitter.poll() is None:
            lines = cmdlines()
            seen += len(lines)
            assert not [line for line in lines if token in line], "the token is on a command line (ps)"
            time.sleep(0.3)
    assert submitter.returncode == 0, (tmp_path / "snakemake.log").read_text()[-3000:]
    assert seen > 0
    tasks = all_tasks(client)
    assert tasks and all(t.status == "succeeded" for t in tasks)
    for task in tasks:
        text = json.dumps([task.args, task.result, task.metadata, str(task.last_error)]).encode()
        assert token not in text
    leaks = [
        path
        for base in (tmp_path, workdir)
        for path in base.rglob("*")
        if path.is_file() and token in path.read_bytes()
    ]
    assert not leaks, f"the token was written to {leaks}"
    assert "succeeded" in worker_log(log_dir)
