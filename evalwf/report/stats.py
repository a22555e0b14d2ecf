"""Success counts and their confidence: what aggregation, the reference comparison and the plots share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from evalwf.plan.batch_environment import BatchEnvironment

Z_95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (what lerobot reports); (nan, nan) for no trials.

    The ends are exact: 0 successes give a lower bound of exactly 0.0 and n successes an upper bound of exactly
    1.0 (the closed form leaves rounding residues such as 6.9e-18 there, which made plots' error bars negative
    and flagged reported 0 % / 100 % scores as outside the interval), and the interval always holds the rate.
    """
    if trials == 0:
        return (math.nan, math.nan)
    if not 0 <= successes <= trials:
        raise ValueError(f"wilson_interval: {successes} successes out of {trials} trials")
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else min(p, max(0.0, centre - half))
    high = 1.0 if successes == trials else max(p, min(1.0, centre + half))
    return (low, high)


@dataclass
class TaskTally:
    suite: str
    task: str
    episodes: int = 0
    successes: int = 0
    batches_done: int = 0
    batches_total: int = 0
    episodes_total: int = 0
    instruction: str = ""  # what the task asks, in words (adapter.task_instruction)
    manifest_bundle: str = ""  # the bundle its manifest was imported from (evalwf manifests import); "" built here
    # Failed episode records with a recorded video, in episode order: the report's gallery is built from these,
    # so it reads no batch file again (evalwf.report.gallery).
    recorded_failures: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # The environment each of its batches recorded (None: not recorded), by batch label (evalwf.report.environments)
    environments: dict[str, BatchEnvironment | None] = field(default_factory=dict, repr=False)
