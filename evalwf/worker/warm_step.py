"""Warm job steps: a guardian that has already imported Snakemake when its job step arrives.

A fresh `python -m snakemake` job step spends about 1.5 s of a 2 s dispatch importing Snakemake, scanning its
plugin registries and importing what the Snakefile imports, before the batch starts. A worker therefore keeps one
spare of these per slot, started while the previous batch runs (or while the slot waits for a task):

    python -m evalwf.worker.warm_step [--grace S] [--preload-after S]      # internal: a worker starts it

imports PRELOAD (after --preload-after seconds, or at once when its job step arrives earlier) and builds
Snakemake's argument parser (which collects the plugin registries), then blocks on one JSON line on its stdin:
{"args": [snakemake options...], "env": {...}, "cwd": ..., "log": ...}. It forks; the child becomes the job step,
exactly the command `python -m snakemake ARGS` would have been: its own session and process group, stdout and
stderr appended to the log, stdin /dev/null, the given cwd and environment, sys.path[0] = cwd,
`snakemake.cli.main(ARGS)`, exit status = Snakemake's. The parent then is the guardian of evalwf.worker.guardian
(lifeline on stdin, subreaper, group kill, exit status passed through). EOF before a spec: exit 0, nothing ran.

Where a warm child could differ from a cold one it runs cold instead (exec of `python -m snakemake ARGS` in the
forked child, same guardian): when a module file imported by the preload changed since (code edited while the
worker waited), or when the job step's directory differs from the spare's and a preloaded module was imported from
the spare's directory (a cold step would import the job directory's copy).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import IO

from evalwf.worker.guardian import become_subreaper, guard_child, stop_on_signals
from evalwf.worker.processes import GuardedProcess

# What every job step of this workflow imports before its batch starts (Snakemake, the Snakefile's imports). Only
# modules whose import does not read the per-job environment (CUDA_VISIBLE_DEVICES, the policy endpoint): no torch.
PRELOAD = (
    "snakemake.cli",
    "snakemake.api",
    "snakemake.workflow",
    "snakemake.dag",
    "snakemake.jobs",
    "snakemake.scheduling.job_scheduler",
    "snakemake.executors.local",
    "smart_open",
    "requests",
    "numpy",
    "yaml",
    "jsonschema",
    "snakemake.storage",
    "packaging.version",
    "graphlib",
    "evalwf.rules.jobs",
    "benchmarks.registry",
    "benchmarks.libero.adapter",
    "benchmarks.robotwin.adapter",
    "benchmarks.standin.adapter",
    "evalwf.benchmark.adapter",
    "evalwf.plan.campaign",
    "evalwf.plan.config",
    "evalwf.plan.manifest",
    "evalwf.common.writable",
)
WARM_ENV = "EVAL_WARM_JOB_STEPS"  # "0": every job step is a fresh `python -m snakemake` (the cold path)


def warm_enabled() -> bool:
    return os.environ.get(WARM_ENV, "1") != "0"


@dataclass(frozen=True)
class StepSpec:
    """What a spare needs to become one job step: the line the worker writes on its stdin (JSON)."""

    args: tuple[str, ...]  # Snakemake's options (the job step is `python -m snakemake ARGS`)
    env: dict[str, str]
    cwd: str
    log: str  # stdout and stderr are appended here

    def to_line(self) -> bytes:
        return json.dumps({"args": list(self.args), "env": self.env, "cwd": self.cwd, "log": self.log}).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> StepSpec:
        record = json.loads(line)
        env = {str(key): str(value) for key, value in record["env"].items()}
        return cls(tuple(str(arg) for arg in record["args"]), env, str(record["cwd"]), str(record["log"]))


@dataclass(frozen=True)
class Preloaded:
    cwd: str
    stamps: dict[str, int]  # module file -> mtime_ns at import


class Inbox:
    """Our stdin: the job step's spec (one JSON line), or EOF (the worker stopped or died: nothing to run)."""

    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def arrived(self, timeout_s: float | None) -> bool:
        """Whether the spec or EOF has arrived, waiting up to timeout_s (None: until it does)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.closed and not self.data.endswith(b"\n"):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([0], [], [], remaining)[0]:
                return False
            chunk = os.read(0, 65536)
            self.closed = not chunk
            self.data += chunk
        return True

    def spec(self) -> StepSpec | None:
        self.arrived(None)
        return StepSpec.from_line(self.data) if self.data.endswith(b"\n") else None


def preload_modules(modules: Sequence[str], inbox: Inbox, cwd: str) -> Preloaded | None:
    """Import `modules`; None as soon as the worker has gone (EOF), without importing the rest."""
    for name in modules:
        if inbox.arrived(0) and inbox.closed:
            return None
        try:
            importlib.import_module(name)
        except Exception as error:  # a module that fails here fails (and is reported) in the step
            print(f"warm job step: preloading {name} failed ({type(error).__name__}: {error})", file=sys.stderr)
    try:
        import snakemake.cli

        snakemake.cli.get_argument_parser()  # collects the executor/storage/... plugin registries once
    except Exception as error:
        print(f"warm job step: building Snakemake's parser failed ({error})", file=sys.stderr)
    return Preloaded(cwd, {**_module_stamps(), **_warm_config_schema()})


def _warm_config_schema() -> dict[str, int]:
    """Build the config schema every job step validates its config against (cached by evalwf.plan.config; ~0.13 s
    of pure-Python YAML per step); its files are stamped like the modules, so that a changed one runs cold."""
    try:
        config = importlib.import_module("evalwf.plan.config")
        registry = importlib.import_module("benchmarks.registry")
        config.config_schema()
        files = [
            resources.files("evalwf.plan").joinpath("config.schema.yaml"),
            resources.files("evalwf.policy").joinpath("policy.schema.yaml"),
            *(registry.schema_file(name) for name in registry.names()),
        ]
        return {str(path): _mtime_ns(str(path)) for path in files}
    except Exception as error:  # the step builds it itself (and reports what is wrong)
        print(f"warm job step: building the config schema failed ({type(error).__name__}: {error})", file=sys.stderr)
        return {}


class SnakefileMemo:
    """Snakemake's Snakefile parser (text -> Python code) memoised in a fork server, so that its job steps do not
    parse the same workflow again (~0.05-0.1 s each). Keyed by everything the parser's output depends on: the local
    file's path and full text, the rule count it starts from and the shell override; anything else (a remote
    Snakefile, a file that cannot be read) is parsed as usual. `learn` parses a workflow's Snakefile and the files it
    includes (literal paths, in order, as executing it would) before any job step of it needs them."""

    INCLUDE = re.compile(r"""workflow\.include\(\s*(["'])(.+?)\1""")

    def __init__(self) -> None:
        self.parsed: dict[tuple[str, str, int, str | None], tuple[str, int, dict[int, int]]] = {}
        self.learned: set[str] = set()

    def install(self) -> None:
        import snakemake.parser
        import snakemake.workflow

        original = snakemake.workflow.parse

        def parse(path, workflow, linemap, overwrite_shellcmd=None, rulecount=0):  # type: ignore[no-untyped-def]
            key = self._key(path, rulecount, overwrite_shellcmd)
            if key is not None and key in self.parsed:
                code, rulecount_after, lines = self.parsed[key]
                snakemake.parser.Shell.overwrite_cmd = overwrite_shellcmd  # what parsing sets
                linemap.update(lines)
                return code, rulecount_after
            result = original(path, workflow, linemap, overwrite_shellcmd=overwrite_shellcmd, rulecount=rulecount)
            if key is not None:
                self.parsed[key] = (result[0], result[1], dict(linemap))
            return result

        snakemake.workflow.parse = parse

    @staticmethod
    def _key(path: object, rulecount: int, overwrite_shellcmd: str | None) -> tuple[str, str, int, str | None] | None:
        from snakemake.sourcecache import LocalSourceFile

        if not isinstance(path, LocalSourceFile):
            return None
        try:  # the path as given: the code names it (a relative one is read from the current directory, as parsed)
            given = path.get_path_or_uri(secret_free=True)
            return given, Path(given).read_text(encoding="utf-8"), rulecount, overwrite_shellcmd
        except (OSError, UnicodeDecodeError):
            return None

    def learn(self, snakefile: str) -> None:
        """Parse `snakefile` and its includes into the memo (once per file; errors are left to the job step)."""
        if snakefile in self.learned or not os.path.isabs(snakefile):
            return
        self.learned.add(snakefile)
        try:
            self._learn(snakefile, 0, depth=0)
        except Exception as error:
            print(f"warm job step: parsing {snakefile} ahead failed ({type(error).__name__}: {error})", file=sys.stderr)

    def _learn(self, path: str, rulecount: int, depth: int) -> int:
        import snakemake.workflow
        from snakemake.sourcecache import LocalSourceFile

        def open_source(source: LocalSourceFile, mode: str = "r") -> IO[str]:
            return open(source.get_path_or_uri(secret_free=True), mode, encoding="utf-8")

        stand_in = SimpleNamespace(sourcecache=SimpleNamespace(open=open_source))  # all the parser uses of it
        source = LocalSourceFile(path)
        code, rulecount = snakemake.workflow.parse(source, stand_in, {}, rulecount=rulecount)
        if depth < 10:
            for _, included in self.INCLUDE.findall(code):  # named as Snakemake's include names it
                child = included if os.path.isabs(included) else source.get_basedir().join(included).path
                rulecount = self._learn(child, rulecount, depth + 1)
        return rulecount


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1  # gone (or unreadable): differs from any real stamp


def _module_stamps() -> dict[str, int]:
    paths = (getattr(module, "__file__", None) for module in list(sys.modules.values()))
    return {path: _mtime_ns(path) for path in paths if isinstance(path, str)}


def cold_reason(preloaded: Preloaded, cwd: str) -> str | None:
    """Why this job step must not reuse the preloaded modules (None: it may)."""
    for path, stamp in preloaded.stamps.items():
        if _mtime_ns(path) != stamp:
            return f"{path} changed since it was preloaded"
    target = os.path.realpath(cwd)
    if target != preloaded.cwd:
        prefix = preloaded.cwd.rstrip("/") + "/"
        local = next((path for path in preloaded.stamps if os.path.realpath(path).startswith(prefix)), None)
        if local is not None:
            return f"{local} was imported from {preloaded.cwd}, the job step runs in {target}"
    return None


def _become_job_step(spec: StepSpec, cold: str | None, close_in_step: Sequence[int] = ()) -> None:
    """In the forked child: turn into `python -m snakemake ARGS` run in spec's cwd/env/log. Never returns."""
    code = 1
    try:
        for fd in close_in_step:
            os.close(fd)
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log = os.open(spec.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(spec.cwd)
        env = spec.env
        args = list(spec.args)
        if cold is not None:
            print(f"warm job step: running cold ({cold})", file=sys.stderr, flush=True)
            os.execve(sys.executable, [sys.executable, "-m", "snakemake", *args], env)
        os.environ.clear()
        os.environ.update(env)
        sys.path[0] = os.getcwd()  # as `python -m snakemake` started in cwd would have it
        import snakemake.cli

        sys.argv = [str(Path(snakemake.cli.__file__).with_name("__main__.py")), *args]

        try:
            snakemake.cli.main(args)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, int | None):
                print(exit_.code, file=sys.stderr)
    except BaseException:  # whatever happens, the child must not return into the guardian
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


class _ForkedChild:
    """The guardian's view of the forked job step (what subprocess.Popen offers)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by the guardian's sweep: the status is lost
                self.returncode = 1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        assert self.returncode is not None
        return self.returncode


def main(argv: list[str]) -> int:
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    grace_s = float(options.get("--grace", 5.0))
    # a Ctrl-C in the worker's terminal reaches this spare too: the worker closes our stdin when it stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cwd = os.path.realpath(os.getcwd())  # now: the directory may be gone by the time a step arrives
    except FileNotFoundError:  # gone already: no module can be told local, so every step runs cold
        cwd = "/"
    inbox = Inbox()
    # started beside a job step that is itself starting: import after it (or as soon as our step arrives)
    inbox.arrived(float(options.get("--preload-after", 0.0)))
    preloaded = preload_modules(PRELOAD, inbox, cwd)
    if preloaded is None:
        return 0
    return serve_one_step(preloaded, inbox, grace_s)


def serve_one_step(preloaded: Preloaded, inbox: Inbox, grace_s: float, close_in_step: Sequence[int] = ()) -> int:
    """Wait for the job step's spec on stdin, fork it, and guard it: its exit status (0 when EOF came first).
    close_in_step: descriptors of ours the job step must not hold (a fork server spare's status pipe)."""
    spec = inbox.spec()
    if spec is None:
        return 0
    cold = cold_reason(preloaded, spec.cwd)
    become_subreaper()
    stop = stop_on_signals()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_job_step(spec, cold, close_in_step)
    return guard_child(_ForkedChild(pid), grace_s, stop)


class SpareStep:
    """The worker's side: one warm job-step guardian, waiting for its spec."""

    def __init__(self, cwd: str, grace_s: float, preload_after_s: float = 0.0):
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "evalwf.worker.warm_step"),
                *("--grace", str(grace_s), "--preload-after", str(preload_after_s)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            cwd=cwd,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def start(self, args: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path) -> subprocess.Popen[bytes]:
        """Hand it the job step; our end of its stdin stays open as the lifeline."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        spec = StepSpec(tuple(args), dict(env), cwd, str(log_path))
        assert self.process.stdin is not None
        self.process.stdin.write(spec.to_line())
        self.process.stdin.flush()
        return self.process

    def discard(self) -> None:
        """EOF before a spec: it exits without running anything (killed if it does not within 5 s)."""
        GuardedProcess.adopt(self.process, self.process.args, None).stop(timeout_s=5.0)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter shutdown: the lifeline thread may still be blocked reading fd 0
