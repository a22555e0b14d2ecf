"""The environment is part of the episodes (invariant 13): what of a benchmark's interpreter and checkout shapes its
episodes is recorded in, and hashed into, every manifest definition (its "environment"), so that episodes found in
one environment (RoboTwin's expert-checked seeds, LIBERO's reset RNG states) are never reused in another: another
environment gives another manifest hash, hence no cache hit and no finished batch reused.

Recorded: the interpreter's Python version, the version of each distribution the adapter declares
(`episode_packages`, null where it is not installed) and its checkout's identity (`checkout_identity`; RoboTwin:
the commit). An adapter that declares neither records nothing (the stand-in).

Read where the workflow is parsed: on the submitter and again in every job step, so it must be cheap and give the
same answer on every host that shares the workflow directory. Package metadata only (no simulator import, nothing
written): in process for the workflow's own interpreter, else one `python -B -c` per interpreter and process
(cached), in the environment job steps give it (evalwf.plan.interpreter.child_env). Where the interpreter or
the checkout cannot be read, the record says so ("unavailable": the reason): the workflow still plans and dry-runs
(with manifest names that stand for nothing), but runs no job (workflow/rules/common.smk, manifest_of), so a
submitter without the environment can never plan other manifests than its workers. The simulator step checks the
record against the interpreter it runs in before it builds a manifest or evaluates a batch (`check_recorded`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from evalwf.benchmark.adapter import get_adapter
from evalwf.benchmark.settings import BenchmarkSettings
from evalwf.common import package_versions
from evalwf.common.errors import EnvironmentUnavailable, ManifestError, SimulatorEnvError
from evalwf.plan.interpreter import child_env, resolve_interpreter
from evalwf.plan.manifest import ManifestDefinition


class InterpreterVersions(TypedDict):
    """What an interpreter reports (evalwf.common.package_versions): its Python version and package versions."""

    python: str
    packages: dict[str, str | None]


class EnvironmentRecord(TypedDict, total=False):
    """What of a benchmark's environment defines its episodes (a manifest definition's `environment`): the Python
    and package versions and the checkout, or only `unavailable` (why it could not be read)."""

    python: str
    packages: dict[str, str | None]
    checkout: str
    unavailable: str


PROBE_TIMEOUT_S = 60.0
UNAVAILABLE = "unavailable"  # a record that could not be read holds only this key: why
# interpreter ("" in process) -> {"python", "packages"} of the packages asked so far, or why it gave no answer
_PROBED: dict[str, InterpreterVersions | str] = {}


def _probe(python: str | None, names: list[str]) -> InterpreterVersions | str:
    """The interpreter's Python version and versions of `names`, or why it could not tell."""
    if python is None:
        return package_versions.interpreter_versions(names)
    source = Path(package_versions.__file__).read_text(encoding="utf-8")
    try:
        done = subprocess.run(
            [python, "-B", "-c", source, json.dumps(names)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), timeout=PROBE_TIMEOUT_S,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} could not report its package versions ({type(error).__name__}: {error})"
    try:
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict) or not isinstance(found.get("packages"), dict) or "python" not in found:
        detail = (done.stderr.strip() or done.stdout.strip())[-500:]
        return f"{python} could not report its package versions (exit status {done.returncode}): {detail}"
    return found


def _versions(python: str | None, names: set[str]) -> InterpreterVersions | str:
    """What `python` reports for `names`: asked once per interpreter and process (again only for names not asked)."""
    key = python or ""
    known = _PROBED.get(key)
    if isinstance(known, str):
        return known
    missing = sorted(names - set(known["packages"] if known else ()))
    if known is None or missing:
        found = _probe(python, missing)
        if isinstance(found, str) or known is None:
            _PROBED[key] = found
        else:
            known["packages"].update(found["packages"])
    return _PROBED[key]


def episode_environments(benchmarks: dict[str, BenchmarkSettings]) -> dict[str, EnvironmentRecord | None]:
    """benchmark -> what of its environment defines its episodes, as its settings name it, read on this host:
    {"python", "packages", "checkout"?}; {"unavailable": why} where that cannot be read; None where the adapter
    declares nothing. One probe per interpreter, for the packages of every benchmark that uses it."""
    problems: dict[str, list[str]] = {name: [] for name in benchmarks}
    checkouts: dict[str, str | None] = {}
    pythons: dict[str, str | None] = {}
    for name, settings in benchmarks.items():
        adapter = get_adapter(name)
        try:
            checkouts[name] = adapter.checkout_identity(settings)
        except EnvironmentUnavailable as error:
            checkouts[name] = None
            problems[name].append(str(error))
        if not adapter.episode_packages and checkouts[name] is None and not problems[name]:
            continue  # nothing recorded, nothing probed
        try:
            pythons[name] = resolve_interpreter(settings.python, name)
        except SimulatorEnvError as error:
            problems[name].append(str(error))
    wanted: dict[str | None, set[str]] = {}
    for name, python in pythons.items():
        wanted.setdefault(python, set()).update(get_adapter(name).episode_packages)
    answers = {python: _versions(python, names) for python, names in wanted.items()}
    records: dict[str, EnvironmentRecord | None] = dict.fromkeys(benchmarks)
    for name in benchmarks:
        found = answers.get(pythons[name]) if name in pythons else None
        if isinstance(found, str):
            problems[name].append(f"config key 'benchmarks.{name}.python': {found}")
        if problems[name]:
            records[name] = {UNAVAILABLE: "; ".join(problems[name])}
        elif isinstance(found, dict):
            packages = get_adapter(name).episode_packages
            records[name] = {"python": found["python"], "packages": {p: found["packages"].get(p) for p in packages}}
            if checkouts[name] is not None:
                records[name]["checkout"] = checkouts[name]
    return records


def unavailable_reason(record: EnvironmentRecord | None) -> str | None:
    return None if record is None else record.get(UNAVAILABLE)


def _differences(recorded: EnvironmentRecord, actual: EnvironmentRecord) -> str:
    def flat(record: EnvironmentRecord) -> dict[str, str | None]:
        return {**{k: v for k, v in record.items() if k != "packages"}, **record.get("packages", {})}

    planned, here = flat(recorded), flat(actual)
    return ", ".join(
        f"{key} {planned.get(key) or 'absent'} there, {here.get(key) or 'absent'} here"
        for key in sorted(set(planned) | set(here))
        if planned.get(key) != here.get(key)
    )


def check_recorded(benchmark: str, settings: BenchmarkSettings, recorded: EnvironmentRecord | None, what: str) -> None:
    """In the simulator step: the manifest definition's environment must be the one this interpreter (and the
    checkout as it is now) has, or the episodes would be found, or evaluated, in another one than the name says."""
    if recorded is None:
        return
    reason = unavailable_reason(recorded)
    if reason is not None:
        raise ManifestError(f"{what} was planned where its environment could not be read ({reason}); fix that, rerun")
    actual = package_versions.interpreter_versions(sorted(recorded.get("packages", {})))
    try:
        checkout = get_adapter(benchmark).checkout_identity(settings)
    except EnvironmentUnavailable as error:
        raise ManifestError(f"{what}: {error}") from None
    if checkout is not None:
        actual["checkout"] = checkout
    if actual != recorded:
        raise ManifestError(
            f"{what} was planned for another environment than {sys.executable} has ({_differences(recorded, actual)}):"
            f" the workflow reads benchmarks.{benchmark}'s environment when it is parsed, and it has changed since, or"
            " differs on this host; rerun snakemake (every host running these jobs needs the same environment)"
        )


def other_environment(manifest_path: str, definition: ManifestDefinition) -> str | None:
    """Where `manifest_path` (this host's name for a task's manifest) is missing but the task has a manifest under
    another name: how that one's environment differs from this host's, for a job step whose submitter planned with
    it (every host running a campaign's jobs needs the environment the campaign was planned with)."""
    path = Path(manifest_path)
    task = path.name.rsplit(".", 2)[0]
    recorded = definition.get("environment")
    for sibling in sorted(path.parent.glob(f"{task}.*.json")):
        try:
            theirs = json.loads(sibling.read_text(encoding="utf-8"))["definition"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        mine = {k: v for k, v in definition.items() if k != "environment"}
        if {k: v for k, v in theirs.items() if k != "environment"} == mine and theirs.get("environment") != recorded:
            return f"{sibling} was planned for {_differences(theirs.get('environment') or {}, recorded or {})}"
    return None
