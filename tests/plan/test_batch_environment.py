"""What a batch records of the environment it ran in: read where it can be, null with the reason where not."""

from __future__ import annotations

import stat

import numpy as np
import pytest

from evalwf.benchmark.adapter import get_adapter
from evalwf.plan import batch_environment as recorder

# nvidia-smi's answer to --query-gpu=index,uuid,name,driver_version --format=csv,noheader,nounits on a mixed node
TWO_GPUS = "0, GPU-aaaa1111, NVIDIA A100-SXM4-80GB, 535.104.05\n1, GPU-bbbb2222, NVIDIA H100 80GB HBM3, 535.104.05\n"


@pytest.fixture
def fresh():
    """Host facts are read once per process: each test reads them anew."""
    for cached in (recorder.cpu_model, recorder.gpu_facts, recorder.cuda_version):
        cached.cache_clear()
    yield
    for cached in (recorder.cpu_model, recorder.gpu_facts, recorder.cuda_version):
        cached.cache_clear()


def nvidia_smi(tmp_path, monkeypatch, answer: str, status: int = 0) -> None:
    """An nvidia-smi on PATH (the only one) that answers `answer` and exits `status`."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\nprintf '%s' '{answer}'\nexit {status}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tool.parent))


class Adapter:
    """What batch_environment reads of an adapter: its name, episode packages and renderer."""

    def __init__(self, packages: tuple[str, ...], renderer):
        self.name, self.episode_packages, self._renderer = "fake", packages, renderer

    def renderer(self, settings):
        return self._renderer()


def test_the_packages_are_this_interpreter_s_as_the_manifest_reads_them(fresh):
    record = recorder.batch_environment(Adapter(("numpy", "no-such-distribution"), lambda: "x"), None)
    assert record["packages"] == {"numpy": np.__version__, "no-such-distribution": None}
    assert record["renderer"] == "x" and "renderer" not in record["why_null"]


def test_cpu_model_is_proc_cpuinfo_s(fresh):
    with open("/proc/cpuinfo") as handle:
        model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    assert recorder.cpu_model() == (model, "")


def test_without_nvidia_smi_the_gpu_fields_are_null_and_say_why(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    record = recorder.batch_environment(get_adapter("standin"), None)
    assert (record["gpu_model"], record["gpu_driver"], record["cuda_version"]) == (None, None, None)
    assert "no nvidia-smi on PATH" in record["why_null"]["gpu_model"]
    assert record["why_null"]["cuda_version"] == "no GPU selected (gpu_model)"
    assert record["renderer"] == "stand-in: numpy-drawn frames (no GL or Vulkan)"


@pytest.mark.parametrize(
    ("visible", "model"),
    [
        ("1", "NVIDIA H100 80GB HBM3"),
        ("GPU-aaaa", "NVIDIA A100-SXM4-80GB"),
        (None, "NVIDIA A100-SXM4-80GB + NVIDIA H100 80GB HBM3"),
        ("0,1", "NVIDIA A100-SXM4-80GB + NVIDIA H100 80GB HBM3"),
    ],
)
def test_the_gpus_cuda_visible_devices_selects_are_recorded(fresh, tmp_path, monkeypatch, visible, model):
    nvidia_smi(tmp_path, monkeypatch, TWO_GPUS)
    assert recorder.gpu_facts(visible) == ({"gpu_model": model, "gpu_driver": "535.104.05"}, {})


@pytest.mark.parametrize("visible", ["7", "", "-1"])
def test_a_selection_of_no_gpu_records_none_naming_it(fresh, tmp_path, monkeypatch, visible):
    nvidia_smi(tmp_path, monkeypatch, TWO_GPUS)
    facts, reasons = recorder.gpu_facts(visible)
    assert facts == {"gpu_model": None, "gpu_driver": None}
    assert f"CUDA_VISIBLE_DEVICES={visible!r} selects none" in reasons["gpu_model"]


def test_a_failing_nvidia_smi_is_the_reason(fresh, tmp_path, monkeypatch):
    nvidia_smi(tmp_path, monkeypatch, "NVIDIA-SMI has failed because it could not communicate with the driver", 9)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    record = recorder.batch_environment(get_adapter("standin"), None)
    assert record["gpu_model"] is None
    assert record["why_null"]["gpu_model"] == (
        "nvidia-smi exit 9: NVIDIA-SMI has failed because it could not communicate with the driver"
    )


def test_a_renderer_that_fails_or_says_nothing_is_null_with_the_reason(fresh):
    def broken():
        raise RuntimeError("Cannot create an EGL context.")

    record = recorder.batch_environment(Adapter((), broken), None)
    assert record["renderer"] is None
    assert record["why_null"]["renderer"] == "RuntimeError: Cannot create an EGL context."
    silent = recorder.batch_environment(Adapter((), lambda: None), None)
    assert silent["why_null"]["renderer"] == "the fake adapter does not say what renders its cameras"
    assert set(silent["why_null"]) == {key for key, value in silent.items() if value is None}
