"""RoboTwin observation -> policy request, policy reply -> RoboTwin actions. Configurable per policy.

Default (benchmarks/robotwin/schema.yaml): the openpi ALOHA format RoboTwin's own pi0/pi05 deploy_policy.py builds
  {"images": {"cam_high": head_camera, "cam_left_wrist": left_camera, "cam_right_wrist": right_camera} (uint8 CHW),
   "state": joint_action.vector (14, float64 as the env gives it), "prompt": instruction}
and 14-value absolute qpos actions for TASK_ENV.take_action(a, action_type='qpos').
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from evalwf.benchmark.records import PolicyMessage, PolicyValue
from evalwf.common.observations import lookup_path

if TYPE_CHECKING:
    from benchmarks.robotwin.settings import RobotwinSettings

# What upstream's get_obs() returns: nested groups (observation.<camera>.rgb, joint_action.vector, endpose, ...)
# of arrays, numbers and lists.
SimValue = Union[np.ndarray, float, int, str, list["SimValue"], "dict[str, SimValue]"]
RobotwinObservation = dict[str, SimValue]


def lookup(observation: RobotwinObservation, path: str) -> Any:
    """'joint_action.vector' -> observation['joint_action']['vector'] (a clear KeyError when absent)."""
    return lookup_path(observation, path, "RoboTwin observation")


@dataclass
class PolicyMapping:
    """The validated `observation` and `action` blocks (benchmarks/robotwin/schema.yaml holds their defaults)."""

    observation: Mapping[str, Any]
    action: Mapping[str, Any]

    @classmethod
    def from_settings(cls, settings: RobotwinSettings) -> PolicyMapping:
        return cls(settings.observation, settings.action)

    @property
    def action_type(self) -> str:
        return self.action["type"]

    def state(self, observation: RobotwinObservation) -> np.ndarray:
        """Sent with the dtype RoboTwin gives it (float64: get_obs builds joint_action.vector from `.astype(float)`
        values), as upstream's in-process pi0 passes it to openpi's Policy.infer: no float32 rounding here."""
        return np.asarray(lookup(observation, self.observation["state_path"])).reshape(-1)

    def request(self, observation: RobotwinObservation, instruction: str) -> PolicyMessage:
        spec = self.observation
        images: dict[str, PolicyValue] = {}
        for key, camera in spec["images"].items():
            rgb = np.asarray(lookup(observation, f"observation.{camera}.rgb"), dtype=np.uint8)
            images[key] = np.ascontiguousarray(np.transpose(rgb, (2, 0, 1)) if spec["image_layout"] == "CHW" else rgb)
        request: PolicyMessage = {}
        if spec["images_key"]:
            request[spec["images_key"]] = images
        else:
            request.update(images)
        request[spec["state_key"]] = self.state(observation)
        request[spec["prompt_key"]] = instruction
        for key, path in spec["extra"].items():
            value = lookup(observation, path)
            request[key] = np.asarray(value, dtype=np.float32) if isinstance(value, np.ndarray) else value
        return request

    def actions(self, reply: PolicyMessage, state: np.ndarray, where: str) -> np.ndarray:
        """The [H, dim] chunk to execute; delta actions are made absolute against the state the policy saw."""
        actions = np.asarray(reply["actions"], dtype=np.float64)
        dim = self.action["dim"]
        if actions.ndim != 2 or actions.shape[0] == 0 or actions.shape[1] < dim:
            raise ValueError(f"{where}: policy returned actions of shape {actions.shape}; expected [horizon, {dim}]")
        actions = actions[:, :dim]
        if self.action["delta"]:
            actions = actions + np.asarray(state, dtype=np.float64)[:dim]
        return actions
