"""Turn a LIBERO observation into what openpi's LIBERO client sends (pure numpy + PIL, no simulator).

- both camera images rotated 180 degrees (LIBERO renders them upside down; the training data was flipped),
  then resized to resize_size x resize_size keeping the aspect ratio, padded with black (bilinear, as
  openpi_client.image_tools.resize_with_pad does with PIL);
- state = end-effector position (3) + end-effector orientation as axis-angle (3) + gripper joints (2);
- the task's language instruction as the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from PIL import Image

from evalwf.benchmark.records import PolicyMessage


def rotate_180(image: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(image[::-1, ::-1])


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Fit an HxWxC uint8 image into height x width without distortion: scale by the tighter ratio (bilinear),
    centre it, fill the rest with zeros. Same size in -> returned unchanged."""
    src_h, src_w = image.shape[:2]
    if (src_h, src_w) == (height, width):
        return image
    scale = max(src_w / width, src_h / height)
    new_w, new_h = int(src_w / scale), int(src_h / scale)
    resized = Image.fromarray(image).resize((new_w, new_h), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (max(0, int((width - new_w) / 2)), max(0, int((height - new_h) / 2))))
    return np.asarray(canvas)


def to_uint8(image: np.ndarray) -> np.ndarray:
    """Float images in [0, 1] to uint8 (clipped); uint8 unchanged."""
    if np.issubdtype(image.dtype, np.floating):
        return (255 * np.clip(image, 0.0, 1.0)).astype(np.uint8)
    return image


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """(x, y, z, w) unit quaternion -> axis * angle (robosuite's convention, w clipped to [-1, 1])."""
    x, y, z, w = (float(v) for v in quat)
    w = min(1.0, max(-1.0, w))
    sin_half = math.sqrt(1.0 - w * w)
    if math.isclose(sin_half, 0.0):
        return np.zeros(3)
    return np.array([x, y, z]) * 2.0 * math.acos(w) / sin_half


def openpi_observation(obs: Mapping[str, np.ndarray], prompt: str, resize_size: int) -> PolicyMessage:
    image = to_uint8(resize_with_pad(rotate_180(obs["agentview_image"]), resize_size, resize_size))
    wrist = to_uint8(resize_with_pad(rotate_180(obs["robot0_eye_in_hand_image"]), resize_size, resize_size))
    state = np.concatenate(
        (obs["robot0_eef_pos"], quat_to_axis_angle(obs["robot0_eef_quat"]), obs["robot0_gripper_qpos"])
    )
    return {
        "observation/image": image,
        "observation/wrist_image": wrist,
        "observation/state": state,
        "prompt": str(prompt),
    }
