"""A real single-node Slurm for the tests: Debian's slurmctld, slurmd and munge (slurm-wlm 22.05), configured and
started here in a private directory on loopback, so that the sbatch templates meet a real sbatch, srun, scancel
and scontrol (resource options, #SBATCH lines, signals to the batch shell, GPUs as generic resources, requeue).

One node ("gpunode") with GPUS GPUs declared as generic resources whose files are character devices made here
(slurmd 22.05 refuses regular files: "not a valid character or block device"; where mknod is not allowed, links to
/dev/null, /dev/zero, ...), so that `--gres=gpu:N` sets
CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS as on a GPU node; more CPUs and memory than the machine has
(SlurmdParameters=config_overrides), so that the templates' per-GPU defaults fit; no cgroups (a container has
none to give): ProctrackType=proctrack/linuxproc follows a job's processes by parentage, as the cgroup plugin does
by membership, so a child in a process group of its own (the submitter's snakemake) still ends with its job.

Needs root (slurmd starts jobs as their user) and the packages (`make test-tools` installs them). Without either the
tests that use it are skipped with the reason; missing packages under CI=true are an error instead."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

GPUS = 4
NODE = "gpunode"
PACKAGES = "slurmctld slurmd slurm-client munge"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"
STAND_IN_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")  # one per GPU where mknod is not allowed

SLURM_CONF = """\
ClusterName=evalwftest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/run/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
KillWait=3
NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=64 RealMemory=524288 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""
GRES_CONF = """\
AutoDetect=off
NodeName={node} Name=gpu File={root}/dev/nvidia[0-{last}]
"""


def require_slurm() -> None:
    """Skip with the reason where the machine cannot run the test Slurm: not root (a run as another user, as
    docs/test-suite.md describes, skips it), or the packages missing, which under CI=true is an error instead (CI
    installs everything itself and runs as root: a skip there would hide that the templates were never run)."""
    if os.geteuid() != 0:
        pytest.skip("the test Slurm needs root (slurmd starts each job as its user)")
    missing = [name for name in DAEMONS + CLIENTS if not shutil.which(name, path=f"{os.environ['PATH']}:{SBIN}")]
    if missing:
        reason = f"Slurm is not installed ({', '.join(missing)} missing): make test-tools installs {PACKAGES}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}", pytrace=False)
        pytest.skip(reason)


@dataclass(frozen=True)
class Slurm:
    """A running test Slurm: its private directory and how to call its commands."""

    root: Path
    startup_s: float  # from starting munged to the node idle in sinfo

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) pointed at this Slurm (its slurm.conf)."""
        return {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, env: Mapping[str, str] | None = None, check: bool = True) -> str:
        done = subprocess.run(
            list(argv), env=self.env(env), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stdout}{done.stderr}")
        return done.stdout

    def sbatch(self, *args: str | Path, env: Mapping[str, str], cwd: Path) -> str:
        """Submit; the job id. `env` is the whole environment sbatch (and so the job) sees."""
        done = subprocess.run(
            ["sbatch", "--parsable", *map(str, args)], env=self.env(env), cwd=cwd, capture_output=True, text=True,
            timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, f"sbatch {' '.join(map(str, args))}: {done.stdout}{done.stderr}"
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job`'s fields (JobState, Reason, Restarts, TRES, ...); values with spaces are cut."""
        text = self.run("scontrol", "show", "job", "--oneliner", job_id)
        return dict(re.findall(r"(\w[\w:/]*)=(\S*)", text))

    def state(self, job_id: str) -> str:
        return self.job(job_id).get("JobState", "?")

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
        """Wait until the job is in one of `states`; its fields then."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not in {sorted(states)} after {timeout:.0f}s: {fields}")
            time.sleep(0.3)

    def cancel_all(self, timeout: float = 30) -> None:
        """Cancel every job and wait until none is left on the node (KillWait=3: then SIGKILL)."""
        self.run("scancel", "--full", "--user", "root", check=False)
        deadline = time.monotonic() + timeout
        while self.run("squeue", "--noheader", check=False).strip() and time.monotonic() < deadline:
            time.sleep(0.3)


def write_config(root: Path) -> None:
    from evalwf.contract.loopback import free_port

    for name, mode in (("munge", 0o700), ("run", 0o755), ("state", 0o700), ("spool", 0o755), ("log", 0o755),
                       ("dev", 0o755)):  # fmt: skip
        (root / name).mkdir(mode=mode)
        (root / name).chmod(mode)
    (root / "munge" / "munge.key").write_bytes(os.urandom(1024))
    (root / "munge" / "munge.key").chmod(0o400)
    for index in range(GPUS):  # NVIDIA's major number; nothing opens them (TaskPlugin=task/none: no device cgroup)
        try:
            os.mknod(root / "dev" / f"nvidia{index}", 0o600 | 0o020000, os.makedev(195, index))
        except PermissionError:  # a container without CAP_MKNOD: existing character devices serve as well
            (root / "dev" / f"nvidia{index}").symlink_to(STAND_IN_DEVICES[index])
    ports = {"ctld_port": free_port(), "slurmd_port": free_port()}
    (root / "slurm.conf").write_text(SLURM_CONF.format(root=root, node=NODE, gpus=GPUS, **ports))
    (root / "gres.conf").write_text(GRES_CONF.format(root=root, node=NODE, last=GPUS - 1))


@contextlib.contextmanager
def running_slurm(keep_logs: Path | None = None) -> Iterator[Slurm]:
    """munged, slurmctld and slurmd in the foreground as children of this process (reaped here, whatever PID 1
    does), on a private directory under /tmp that munged accepts (its socket's directories must be searchable by
    all: pytest's 0700 base directory is not); every job cancelled, the daemons stopped and the directory removed
    at the end (its logs copied to `keep_logs` first, where given)."""
    require_slurm()
    root = Path(tempfile.mkdtemp(prefix="evalwf-slurm-"))
    root.chmod(0o755)
    daemons: list[subprocess.Popen[bytes]] = []
    slurm = None
    try:
        write_config(root)
        started = time.monotonic()
        env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"), "PATH": f"{os.environ['PATH']}:{SBIN}"}
        munge = root / "munge"
        commands = [
            ["munged", "--foreground", f"--key-file={munge}/munge.key", f"--socket={root}/run/munge.sock",
             f"--pid-file={munge}/munged.pid", f"--log-file={root}/log/munged.log", f"--seed-file={munge}/seed"],
            ["slurmctld", "-D", "-i", "-f", str(root / "slurm.conf")],
            ["slurmd", "-D", "-N", NODE, "-f", str(root / "slurm.conf")],
        ]  # fmt: skip
        for argv, name in zip(commands, DAEMONS, strict=True):
            with open(root / "log" / f"{name}.out", "wb") as out:
                daemons.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root))
            if name == "munged":
                wait_until(lambda: (root / "run" / "munge.sock").exists(), 20, "munged's socket", root, daemons)
        slurm = Slurm(root, 0.0)
        wait_until(lambda: slurm.run("sinfo", "--noheader", "-o", "%t", check=False).strip() == "idle", 30,
                   f"node {NODE} idle in sinfo", root, daemons)  # fmt: skip
        slurm = Slurm(root, time.monotonic() - started)
        yield slurm
    finally:
        if slurm is not None:
            slurm.cancel_all()
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        if keep_logs is not None:
            shutil.copytree(root / "log", keep_logs, dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, root: Path, daemons: list[subprocess.Popen[bytes]]
) -> None:
    """Wait for `predicate`; fail with the daemons' logs if one of them exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while not predicate():
        dead = [d.args[0] for d in daemons if d.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in (root / "log").iterdir())
            raise AssertionError(f"the test Slurm did not come up ({what}; exited: {dead}):\n{logs}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    """One test Slurm per test process (its tests live in one file, which xdist's loadfile keeps on one worker); its
    daemons' logs are left in pytest's temporary directory (slurm-logs*)."""
    with running_slurm(tmp_path_factory.mktemp("slurm-logs")) as cluster:
        yield cluster
