"""The stand-in's settings: one field per key of benchmarks/standin/schema.yaml (and the keys every benchmark has).

No defaults here: the schema gives them (evalwf.benchmark.settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalwf.benchmark.settings import BenchmarkSettings


@dataclass(frozen=True)
class StandinSettings(BenchmarkSettings):
    suites: Mapping[str, str | tuple[str, ...]]  # suite -> "all" or task names
    max_steps: int
    replan_steps: int
    tolerance: float
    step_time_s: Mapping[str, Any]  # {"default": seconds, "tasks": {task: seconds}}
    record_video: str
    faults: tuple[Mapping[str, Any], ...]
