"""A deterministic stand-in simulator: an episode's outcome is a function of its setup and the policy's actions.

The state is a point moving toward a goal; the policy sees both and answers action chunks. Per-task step times
emulate slow or long-tail tasks, and faults (raise, hang, slow start) exercise failure handling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from evalwf.benchmark.seeds import derive_seed, isolated_rng

SUITES: dict[str, tuple[str, ...]] = {
    "alpha": ("reach", "push", "stack", "slide"),
    "beta": ("open", "close", "pour"),
}
INSTRUCTION_TEMPLATES = ("{verb} the {color} block", "please {verb} the {color} object", "{verb} it: the {color} one")
COLORS = ("red", "green", "blue", "yellow", "purple")
STATE_DIM = 4
STEP_GAIN = 0.2


def episode_seed(suite: str, task: str, index: int, base_seed: int) -> int:
    return derive_seed("standin", suite, task, index, base_seed)


def episode_instruction(task: str, seed: int) -> str:
    rng = isolated_rng(seed, "instruction")
    template = INSTRUCTION_TEMPLATES[int(rng.integers(len(INSTRUCTION_TEMPLATES)))]
    return template.format(verb=task, color=COLORS[int(rng.integers(len(COLORS)))])


@dataclass
class StandinEpisode:
    """One episode: reset from its seed, step with actions, success when the state reaches the goal."""

    seed: int
    instruction: str
    tolerance: float
    step_time_s: float

    def __post_init__(self) -> None:
        rng = isolated_rng(self.seed, "setup")
        self.state = rng.uniform(-1.0, 1.0, STATE_DIM)
        self.goal = rng.uniform(-1.0, 1.0, STATE_DIM)
        self.image = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
        self.steps = 0
        self.success = False

    def observation(self) -> dict[str, object]:
        return {
            "observation/state": self.state.astype(np.float32),
            "observation/goal": self.goal.astype(np.float32),
            "observation/image": self.image,
            "prompt": self.instruction,
        }

    def frame(self, size: int = 64) -> np.ndarray:
        """An RGB picture of the episode for rollout videos: its image, the goal (green) and the state (red)."""
        picture = np.kron(self.image, np.ones((size // 16, size // 16, 1), dtype=np.uint8))
        for point, colour in ((self.goal, (0, 255, 0)), (self.state, (255, 0, 0))):
            x, y = (np.clip((point[:2] + 1) / 2, 0, 1) * (size - 4)).astype(int)
            picture[y : y + 4, x : x + 4] = colour
        return picture

    def step(self, action: np.ndarray) -> bool:
        if self.step_time_s:
            time.sleep(self.step_time_s)
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.size < STATE_DIM:
            raise ValueError(f"stand-in simulator needs actions of at least {STATE_DIM} values, got {action.size}")
        self.state = self.state + STEP_GAIN * np.clip(action[:STATE_DIM], -1.0, 1.0)
        self.steps += 1
        self.success = bool(np.max(np.abs(self.state - self.goal)) < self.tolerance)
        return self.success
