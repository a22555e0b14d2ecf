"""Static facts about the LIBERO suites and the evaluation protocol (no simulator import)."""

from __future__ import annotations

from dataclasses import dataclass

LIBERO_VERSION = "hf-libero==0.1.4"
# What shapes a LIBERO manifest (the RNG states its resets leave, the init states and scenes): recorded with the
# interpreter's Python version in every manifest definition (evalwf.plan.environment).
EPISODE_PACKAGES = ("hf-libero", "robosuite", "mujoco", "numpy")
# The openpi examples/libero loop: seed once per task env, run trials in order, 10 wait steps, replan every 5.
PROTOCOL = "openpi-sequential-v1"
NUM_INIT_STATES = 50  # init states shipped per task; trial j uses init state j
DUMMY_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)  # no motion, gripper open: the wait steps' action
ACTION_DIM = 7


@dataclass(frozen=True)
class Suite:
    name: str
    num_tasks: int
    max_steps: int  # openpi's per-suite limit (longest training demo plus a margin)


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite("libero_spatial", 10, 220),
        Suite("libero_object", 10, 280),
        Suite("libero_goal", 10, 300),
        Suite("libero_10", 10, 520),
        Suite("libero_90", 90, 400),
    )
}


def effective_max_steps(suite: str, override: int | None) -> int:
    return SUITES[suite].max_steps if override is None else int(override)
