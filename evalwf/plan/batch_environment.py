"""The environment a batch ran in, recorded in its result file (`environment`): numbers move with the simulator's
package versions, the GPU, its driver and the renderer, so a campaign whose batches ran on two kinds of node must
be told from one that did not (`evalwf status`, the report and `evalwf compare` read it: evalwf/report/environments.py).

Recorded by the job step in the benchmark's own interpreter, once per batch after its episodes (never per episode):
- `python`, `packages`: that interpreter's Python version and the versions of the distributions the adapter
  declares (`episode_packages`, the set a manifest records), read by the same function as the manifest's
  (evalwf.common.package_versions.interpreter_versions);
- `cpu_model`: /proc/cpuinfo's model name (else the platform's processor);
- `gpu_model`, `gpu_driver`: nvidia-smi's name and driver version of the GPUs CUDA_VISIBLE_DEVICES selects;
- `cuda_version`: the CUDA version the driver supports (libcuda's cuDriverGetVersion, what nvidia-smi prints);
- `renderer`: what renders the cameras, as the simulator's own context names it (the adapter's `renderer`).
A value that cannot be read is null, and `why_null` says why: nothing is guessed. Host facts are read once per
process and GPU selection. Light core: standard library only, Python 3.10.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
from functools import lru_cache
from typing import Any, TypedDict

from evalwf.benchmark.adapter import BenchmarkAdapter
from evalwf.benchmark.settings import BenchmarkSettings
from evalwf.common.package_versions import interpreter_versions

ENVIRONMENT_KEY = "environment"  # the batch result's key (readers: evalwf/report/environments.py, exporters)
NVIDIA_SMI_TIMEOUT_S = 20.0


class BatchEnvironment(TypedDict):
    """What a batch ran under; a null value's reason is in `why_null` (field -> why)."""

    python: str
    packages: dict[str, str | None]
    cpu_model: str | None
    gpu_model: str | None
    gpu_driver: str | None
    cuda_version: str | None
    renderer: str | None
    why_null: dict[str, str]


Facts = dict[str, str | None]  # field -> value (None: not read)
Reasons = dict[str, str]  # field -> why it is None


@lru_cache(maxsize=1)
def cpu_model() -> tuple[str | None, str]:
    """The CPU's model name, or None and why."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and value.strip():
                    return value.strip(), ""
    except OSError as error:
        reason = f"/proc/cpuinfo not readable ({error.strerror or error})"
    else:
        reason = "/proc/cpuinfo names no model"
    processor = platform.processor()
    return (processor, "") if processor else (None, f"{reason}, and the platform names no processor")


def _selected(rows: list[list[str]], visible: str | None) -> tuple[list[list[str]], str]:
    """The nvidia-smi rows (index, uuid, name, driver) of the GPUs `visible` (CUDA_VISIBLE_DEVICES) selects: all
    when it is unset; by index or UUID (prefix) otherwise. Also why none was selected."""
    if visible is None:
        return rows, "nvidia-smi lists no GPU"
    chosen = []
    for entry in (part.strip() for part in visible.split(",")):
        if not entry or entry.startswith("-"):
            break  # CUDA stops at the first invalid entry
        found = [row for row in rows if row[0] == entry or row[1].startswith(entry)]
        if not found:
            break
        chosen.extend(found)
    return chosen, f"CUDA_VISIBLE_DEVICES={visible!r} selects none of the GPUs nvidia-smi lists"


@lru_cache(maxsize=8)
def gpu_facts(visible: str | None) -> tuple[Facts, Reasons]:
    """gpu_model and gpu_driver of the GPUs `visible` selects (several different models: joined by ' + ')."""
    fields = ("gpu_model", "gpu_driver")
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return dict.fromkeys(fields), dict.fromkeys(fields, "no nvidia-smi on PATH (no NVIDIA driver on this node?)")
    command = [tool, "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return dict.fromkeys(fields), dict.fromkeys(fields, f"nvidia-smi did not answer ({type(error).__name__})")
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
        return dict.fromkeys(fields), dict.fromkeys(fields, f"nvidia-smi exit {done.returncode}: {said[0][:200]}")
    rows = [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.count(",") >= 3]
    chosen, reason = _selected(rows, visible)
    if not chosen:
        return dict.fromkeys(fields), dict.fromkeys(fields, reason)
    facts = {
        "gpu_model": " + ".join(dict.fromkeys(row[2] for row in chosen)),
        "gpu_driver": " + ".join(dict.fromkeys(row[3] for row in chosen)),
    }
    return facts, {}


@lru_cache(maxsize=1)
def cuda_version() -> tuple[str | None, str]:
    """The CUDA version the installed driver supports (cuDriverGetVersion: no CUDA context is made), or why not."""
    try:
        library = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        status = library.cuDriverGetVersion(ctypes.byref(version))
    except (OSError, AttributeError) as error:
        return None, f"libcuda.so.1 not loadable ({error})"
    if status != 0 or version.value <= 0:
        return None, f"cuDriverGetVersion returned status {status}"
    return f"{version.value // 1000}.{version.value % 1000 // 10}", ""


def host_facts() -> tuple[Facts, Reasons]:
    """CPU model, GPU model and driver (of the GPUs CUDA_VISIBLE_DEVICES selects) and CUDA version of this node."""
    values: Facts = {}
    reasons: Reasons = {}
    values["cpu_model"], reasons["cpu_model"] = cpu_model()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpu, why = gpu_facts(visible)
    values.update(gpu)
    reasons.update(why)
    if values["gpu_model"] is None:
        values["cuda_version"], reasons["cuda_version"] = None, "no GPU selected (gpu_model)"
    else:
        values["cuda_version"], reasons["cuda_version"] = cuda_version()
    return values, {field: reason for field, reason in reasons.items() if reason and values.get(field) is None}


def batch_environment(adapter: BenchmarkAdapter[Any], settings: BenchmarkSettings) -> BatchEnvironment:
    """The environment of a batch evaluated in this interpreter by `adapter` (evalwf.benchmark.adapter) under its
    `settings`: packages, host facts and the adapter's renderer (an error there is recorded as the reason)."""
    versions = interpreter_versions(list(adapter.episode_packages))
    values, reasons = host_facts()
    try:
        renderer = adapter.renderer(settings)
        if renderer is None:
            reasons["renderer"] = f"the {adapter.name} adapter does not say what renders its cameras"
    except Exception as error:  # a record, not a check: the batch's episodes are done and valid
        renderer = None
        reasons["renderer"] = f"{type(error).__name__}: {str(error).strip()[:300]}"
    return {
        "python": versions["python"],
        "packages": versions["packages"],
        "cpu_model": values["cpu_model"],
        "gpu_model": values["gpu_model"],
        "gpu_driver": values["gpu_driver"],
        "cuda_version": values["cuda_version"],
        "renderer": renderer,
        "why_null": reasons,
    }
