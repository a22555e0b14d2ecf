"""LIBERO's settings: one field per key of benchmarks/libero/schema.yaml (and the keys every benchmark has).

No defaults here: the schema gives them (evalwf.benchmark.settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evalwf.benchmark.settings import BenchmarkSettings


@dataclass(frozen=True)
class LiberoSettings(BenchmarkSettings):
    suites: Mapping[str, str | tuple[int, ...]]  # suite -> "all" or task ids
    max_steps: int | None  # None: openpi's per-suite limit (suites.effective_max_steps)
    replan_steps: int
    num_wait_steps: int
    camera_size: int
    resize_size: int
    record_video: str
