"""Whether this node can run a benchmark's jobs, judged as a worker would run them: the interpreter that
`benchmarks.<name>.python` names starts and imports the job code (evalwf.job.sim_checks, the probe, runs
there), the GPU a worker sets in CUDA_VISIBLE_DEVICES exists, and the benchmark's own checks pass in that
interpreter with that CUDA_VISIBLE_DEVICES (simulator, renderer, assets: its adapter's node_checks).

The one definition behind `evalwf doctor`, `evalwf benchmark check` and a worker's refusal to take jobs of a
benchmark whose checks fail (evalwf.worker.node_gate).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache

from benchmarks import registry
from evalwf.benchmark.node_checks import LIGHT_CORE, RESULT_PREFIX, CheckResult
from evalwf.common.errors import SimulatorEnvError
from evalwf.common.json_types import JsonObject
from evalwf.plan.interpreter import child_env, resolve_interpreter

PROBE_MODULE = "evalwf.job.sim_checks"
# A cold RoboTwin environment imports torch, cuRobo and SAPIEN and renders a frame; a worker holds a claimed task
# meanwhile: well within its 5-minute lease.
PROBE_TIMEOUT_S = 180.0
INTERPRETER = "interpreter"
GPU = "gpu"


def node_ready(results: list[CheckResult]) -> bool:
    return bool(results) and all(result.ok for result in results)


def check_benchmark(
    benchmark: str, section: JsonObject, gpu: str | None = None, timeout_s: float = PROBE_TIMEOUT_S
) -> list[CheckResult]:
    """Every check of `benchmark` (its validated config section) on this node, with CUDA_VISIBLE_DEVICES=`gpu` as a
    worker started with `--gpus gpu` sets it (None: as this process has it). Stops at the first check that the
    others depend on (the interpreter, the probe's own start)."""
    setup = registry.adapter(benchmark).environment_setup
    results = [visible_gpu(benchmark, gpu)]
    key = f"benchmarks.{benchmark}.python"
    setting = section.get("python")
    try:
        python = resolve_interpreter(setting, benchmark)
    except SimulatorEnvError as error:
        fix = f"point {key} at an existing python executable or environment prefix (or remove it: the workflow's own)"
        return [*results, CheckResult(benchmark, INTERPRETER, False, str(error), fix)]
    interpreter = python or sys.executable
    origin = f"{key} = {setting!r}" if python else f"{key} is null: the workflow's own interpreter"
    results.append(CheckResult(benchmark, INTERPRETER, True, f"{interpreter} ({origin})"))
    return results + _probe(benchmark, section, interpreter, gpu, timeout_s, setup)


def _probe(
    benchmark: str, section: JsonObject, interpreter: str, gpu: str | None, timeout_s: float, setup: str
) -> list[CheckResult]:
    env = child_env()
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    with tempfile.NamedTemporaryFile("w", prefix="node-check-", suffix=".json") as handle:
        json.dump(section, handle)
        handle.flush()
        command = [interpreter, "-m", PROBE_MODULE, benchmark, handle.name]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                errors="replace",
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            detail = f"the checks did not finish in {timeout_s:.0f} s in {interpreter}"
            return [CheckResult(benchmark, LIGHT_CORE, False, detail, f"run them by hand: {_shown(command)}")]
        except OSError as error:
            return [CheckResult(benchmark, LIGHT_CORE, False, f"{interpreter} could not be started: {error}", setup)]
    results = [
        CheckResult.from_json(line[len(RESULT_PREFIX) :])
        for line in done.stdout.splitlines()
        if line.startswith(RESULT_PREFIX)
    ]
    last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    if not results:
        return [
            CheckResult(
                benchmark,
                LIGHT_CORE,
                False,
                f"{interpreter} cannot import evalwf.job.sim_step and {registry.package(benchmark)}.adapter: {last}",
                "that environment needs Python >= 3.10 and this checkout's light core (numpy, msgpack, websockets, "
                f"PyYAML, jsonschema; this checkout is put on its PYTHONPATH); {setup}",
            )
        ]
    if done.returncode != 0:  # the probe started, then the adapter could not even declare its checks
        results.append(CheckResult(benchmark, "checks", False, f"the probe failed: {last}", setup))
    return results


def _shown(command: list[str]) -> str:
    return " ".join([*command[:-1], "<section.json>"])


def visible_gpu(benchmark: str, gpu: str | None) -> CheckResult:
    """The GPU a worker would set in CUDA_VISIBLE_DEVICES exists on this node (where it has an NVIDIA driver)."""
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is None else gpu
    listed = _nvidia_gpus()
    if listed is None:  # nothing to check against: a warning, not a proof that the GPU exists
        shown = f"CUDA_VISIBLE_DEVICES={wanted} is a label only" if wanted else "CPU only"
        detail = f"no NVIDIA driver: GPU not checked ({shown}; CPU rendering)"
        return CheckResult(benchmark, GPU, True, detail, warning=True)
    if isinstance(listed, str):
        return CheckResult(benchmark, GPU, False, listed, "check the NVIDIA driver: `nvidia-smi -L` must list the GPUs")
    if not wanted:
        return CheckResult(benchmark, GPU, True, f"CUDA_VISIBLE_DEVICES unset: all {len(listed)} GPU(s) visible")
    ids = [item.strip() for item in wanted.split(",") if item.strip()]
    missing = [item for item in ids if item not in listed]
    if missing:
        known = ", ".join(key for key in listed if key.isdigit()) or "none"
        return CheckResult(
            benchmark,
            GPU,
            False,
            f"CUDA_VISIBLE_DEVICES={wanted}: no GPU {', '.join(missing)} on this node (nvidia-smi lists {known})",
            "start the worker (or `evalwf doctor --gpus`) with ids that `nvidia-smi -L` lists",
        )
    return CheckResult(benchmark, GPU, True, f"CUDA_VISIBLE_DEVICES={wanted}: {'; '.join(listed[i] for i in ids)}")


@lru_cache(maxsize=1)
def _nvidia_gpus() -> dict[str, str] | str | None:
    """GPU index and UUID -> its `nvidia-smi -L` line; None without an NVIDIA driver; the error when the driver
    does not answer."""
    tool = shutil.which("nvidia-smi")
    if tool is None and not os.path.exists("/proc/driver/nvidia"):
        return None
    if tool is None:
        return "an NVIDIA driver is loaded (/proc/driver/nvidia) but nvidia-smi is not on PATH"
    try:
        done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi -L did not answer: {error}"
    if done.returncode != 0:
        return f"nvidia-smi -L failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[:300]}"
    listed: dict[str, str] = {}
    for line in done.stdout.splitlines():
        head, _, rest = line.partition(":")
        if not head.startswith("GPU "):
            continue
        index = head.split()[1]
        listed[index] = line.strip()
        if "UUID: " in rest:
            listed[rest.split("UUID: ", 1)[1].rstrip(")").strip()] = line.strip()
    return listed
