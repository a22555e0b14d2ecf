"""Stand-in of RoboTwin's envs/_base_task.py: the Base_Task API that script/eval_policy.py drives, on a
deterministic numpy "scene" instead of SAPIEN + Curobo. See ../README.md for what is mimicked on purpose."""

import hashlib
import os
import sys

import numpy as np
import yaml

from ._GLOBAL_CONFIGS import CONFIGS_PATH
from .utils import UnStableError

QPOS_DIM = 14  # left arm 6 + gripper, right arm 6 + gripper
SUBSTEPS = 4  # "physics" substeps per take_action; success is checked after each one (as upstream)
GAIN = 0.2  # per substep, the joints move this fraction of the way to the commanded qpos
PHYSICS_NOISE = 0.002  # per substep and joint, drawn from the global numpy stream
EXPERT_STEPS = 30
ARM_JOINTS = {"left": [0, 1, 2], "right": [7, 8, 9]}  # the joints an arm's tasks must bring to the target
OBJECTS = ("050_bell", "001_bottle", "021_cup", "002_bowl", "047_mouse", "048_stapler", "063_tabletrashbin")


def task_params(task_name):
    """Per-task oracle parameters, a pure function of the task name."""
    h = hashlib.sha256(str(task_name).encode()).digest()
    arm_first = 7 * (h[5] % 2)
    return {
        "p_unstable": 0.04 + 0.02 * (h[0] % 5),
        "p_raise": 0.02 + 0.02 * (h[1] % 3),
        "p_plan_fail": 0.04 + 0.02 * (h[2] % 4),
        "p_check_fail": 0.04 + 0.02 * (h[3] % 4),
        "tolerance": 0.025 + 0.005 * (h[4] % 3),
        "active_joints": list(range(arm_first, arm_first + 3)),
        "object": OBJECTS[h[7] % len(OBJECTS)],
        "variants": 1 + h[8] % 3,
    }


class _Robot:
    """Created on the first setup and reset on later ones (upstream reuses Robot and its planners)."""

    def __init__(self, **kwags):
        self.resets = 0
        self.left_arm_dim = len(kwags["left_embodiment_config"]["arm_joints_name"][0])
        self.right_arm_dim = len(kwags["right_embodiment_config"]["arm_joints_name"][1])

    def reset(self, **kwags):
        self.resets += 1


class Base_Task:
    cache_clears = 0  # counts close_env(clear_cache=True) like sapien's global render cache

    def __init__(self):
        self.robot = None
        self.closed = 0

    # ------------------------------------------------------------------ setup
    def _init_task_env_(self, table_xy_bias=[0, 0], table_height_bias=0, **kwags):  # noqa: B006 (as upstream)
        seed = kwags.get("seed", 0)
        np.random.seed(seed)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.manual_seed(seed)

        self.task_name = kwags.get("task_name")
        self.ep_num = kwags.get("now_ep_num", 0)
        self.render_freq = kwags.get("render_freq", 10)
        self.data_type = kwags.get("data_type")
        self.eval_mode = kwags.get("eval_mode", False)
        random_setting = kwags.get("domain_randomization")
        self.random_background = random_setting.get("random_background", False)
        self.cluttered_table = random_setting.get("cluttered_table", False)
        self.clean_background_rate = random_setting.get("clean_background_rate", 1)
        self.random_table_height = random_setting.get("random_table_height", 0)
        self.random_light = random_setting.get("random_light", False)
        self.crazy_random_light_rate = random_setting.get("crazy_random_light_rate", 0)
        self.crazy_random_light = 0 if not self.random_light else np.random.rand() < self.crazy_random_light_rate

        self.plan_success = True
        self.step_lim = None
        self.take_action_cnt = 0
        self.eval_video_path = kwags.get("eval_video_save_dir")
        self.eval_success = False
        self.table_z_bias = np.random.uniform(low=-self.random_table_height, high=0) + table_height_bias
        self.instruction = None
        self.params = task_params(self.task_name)
        self.record_cluttered_objects = []
        self.prohibited_area = []

        self.setup_scene()
        self.create_table_and_wall(table_xy_bias=table_xy_bias)
        self.load_robot(**kwags)
        self.load_camera(**kwags)
        self.load_actors()
        if self.cluttered_table:
            self.get_cluttered_table()
        is_stable, unstable_list = self.check_stable()
        if not is_stable:
            raise UnStableError(f"Objects is unstable in seed({seed}), unstable objects: {', '.join(unstable_list)}")

        if self.eval_mode:
            with open(os.path.join(CONFIGS_PATH, "_eval_step_limit.yml")) as f:
                try:
                    self.step_lim = yaml.safe_load(f)[self.task_name]
                except Exception:
                    print(f"{self.task_name} not in step limit file, set to 1000")
                    self.step_lim = 1000

        self.info = {
            "cluttered_table_info": self.record_cluttered_objects,
            "texture_info": {"wall_texture": self.wall_texture, "table_texture": self.table_texture},
            "info": {},
        }

    def setup_scene(self, **kwargs):
        self.light = np.array([0.5, 0.5, 0.5])
        if self.random_light:
            self.light = np.random.rand(3)

    def create_table_and_wall(self, table_xy_bias=[0, 0], table_height=0.74):  # noqa: B006
        self.table_xy_bias = table_xy_bias
        self.wall_texture, self.table_texture = None, None
        if self.random_background:
            wall, table = np.random.randint(0, 10), np.random.randint(0, 10)
            self.wall_texture, self.table_texture = f"unseen/{wall}", f"unseen/{table}"
            if np.random.rand() <= self.clean_background_rate:
                self.wall_texture = None
            if np.random.rand() <= self.clean_background_rate:
                self.table_texture = None

    def get_cluttered_table(self, cluttered_numbers=10, xlim=[-0.59, 0.59], ylim=[-0.34, 0.34], zlim=[0.741]):  # noqa: B006
        # As upstream: the default lists are shifted in place, so the shift accumulates over setups whenever
        # table_xy_bias is not zero (dump_bin_bigbin, put_bottles_dustbin).
        self.record_cluttered_objects = []
        xlim[0] += self.table_xy_bias[0]
        xlim[1] += self.table_xy_bias[0]
        ylim[0] += self.table_xy_bias[1]
        ylim[1] += self.table_xy_bias[1]
        if np.random.rand() < self.clean_background_rate:
            return
        placed, tries = 0, 0
        while placed < cluttered_numbers and tries < 50:
            x, y = np.random.uniform(*xlim), np.random.uniform(*ylim)
            kind = int(np.random.randint(len(OBJECTS)))
            if abs(x - self.table_xy_bias[0]) > 0.59 or abs(y - self.table_xy_bias[1]) > 0.34:
                tries += 1  # off the table
                continue
            placed += 1
            self.record_cluttered_objects.append({"object_type": OBJECTS[kind], "object_index": kind})

    def load_robot(self, **kwags):
        if self.robot is None:
            self.robot = _Robot(**kwags)
        else:
            self.robot.reset(**kwags)

    def load_camera(self, **kwags):
        self.camera_h = kwags.get("head_camera_h", 24)
        self.camera_w = kwags.get("head_camera_w", 32)

    def load_actors(self):
        self.fate = np.random.rand()  # the oracle's draw: which expert outcome this scene gets
        self.object_id = int(np.random.randint(self.params["variants"]))
        self.arm = "left" if np.random.rand() < 0.5 else "right"
        self.target_qpos = np.random.uniform(-0.5, 0.5, QPOS_DIM)
        self.qpos = np.random.normal(0.0, 0.05, QPOS_DIM)
        self.scene_image = np.random.randint(0, 256, size=(self.camera_h, self.camera_w, 3)).astype(np.uint8)

    def _thresholds(self):
        p = self.params
        a = p["p_unstable"]
        b = a + p["p_raise"]
        c = b + p["p_plan_fail"]
        return a, b, c, c + p["p_check_fail"]

    def check_stable(self):
        for _ in range(3):
            np.random.rand()  # settling "physics"
        unstable, _, _, _ = self._thresholds()
        if self.fate < unstable:
            return False, [self.params["object"]]
        return True, []

    # ------------------------------------------------------------------ expert
    def play_once(self):
        _, raise_below, plan_fail_below, check_fail_below = self._thresholds()
        if self.fate < raise_below:
            raise RuntimeError(f"stand-in planner crashed for {self.task_name} (no IK solution)")
        self.info["info"] = {"{A}": f"{self.params['object']}/base{self.object_id}", "{a}": self.arm}
        if self.fate < plan_fail_below:
            self.plan_success = False
            return self.info
        joints = self.success_joints()
        goal = self.target_qpos.copy()
        if self.fate < check_fail_below:
            goal[joints[0]] += 3 * self.params["tolerance"]  # the expert misses
        start = self.qpos.copy()
        for i in range(1, EXPERT_STEPS + 1):
            self.qpos = start + (goal - start) * i / EXPERT_STEPS + np.random.normal(0, PHYSICS_NOISE, QPOS_DIM)
        self.qpos[joints] = goal[joints]
        return self.info

    def success_joints(self):
        """The joints check_success compares with the target (a task may choose them from play_once's arm)."""
        return self.params["active_joints"]

    def joints_reached(self):
        joints = self.success_joints()
        return bool(np.max(np.abs(self.qpos[joints] - self.target_qpos[joints])) < self.params["tolerance"])

    def check_success(self):
        return self.joints_reached()

    # ------------------------------------------------------------------ policy side
    def _update_render(self):
        if self.crazy_random_light:
            self.light = np.clip(self.light + np.random.rand(3) * 0.2 - 0.1, 0, 1)

    def _image(self, camera_index):
        image = np.roll(self.scene_image, 3 * camera_index, axis=1).astype(np.int16)
        image = image + int(40 * (self.light.mean() - 0.5))
        image[0, :QPOS_DIM, camera_index] = np.clip((self.qpos + 1.0) * 127.5, 0, 255).astype(np.int16)
        return np.clip(image, 0, 255).astype(np.uint8)

    def get_obs(self):
        self._update_render()
        cameras = {}
        for index, name in enumerate(("head_camera", "left_camera", "right_camera")):
            cameras[name] = {
                "intrinsic_cv": np.eye(3),
                "extrinsic_cv": np.eye(3, 4),
                "cam2world_gl": np.eye(4),
                "rgb": self._image(index),
            }
        qpos = self.qpos.copy()
        obs = {
            "observation": cameras,
            "pointcloud": [],
            "joint_action": {
                "left_arm": qpos[:6],
                "left_gripper": float(qpos[6]),
                "right_arm": qpos[7:13],
                "right_gripper": float(qpos[13]),
                "vector": qpos,
            },
            "endpose": {
                "left_endpose": np.zeros(7),
                "left_gripper": float(qpos[6]),
                "right_endpose": np.zeros(7),
                "right_gripper": float(qpos[13]),
            },
            "oracle": {"target_qpos": self.target_qpos.copy()},  # stand-in only
        }
        self.now_obs = obs
        return obs

    def take_action(self, action, action_type="qpos"):
        if self.take_action_cnt == self.step_lim or self.eval_success:
            return
        if action_type != "qpos":
            raise NotImplementedError(f"the stand-in supports action_type='qpos' only, not {action_type!r}")
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (QPOS_DIM,):
            raise ValueError(f"qpos action must have {QPOS_DIM} values, got {action.shape}")
        self.take_action_cnt += 1
        self._update_render()
        for _ in range(SUBSTEPS):
            self.qpos = self.qpos + GAIN * (action - self.qpos) + np.random.normal(0, PHYSICS_NOISE, QPOS_DIM)
            if self.check_success():
                self.eval_success = True
                self.get_obs()
                return
        self._update_render()

    def set_instruction(self, instruction=None):
        self.instruction = instruction

    def get_instruction(self, instruction=None):
        return self.instruction

    def close_env(self, clear_cache=False):
        if clear_cache:
            Base_Task.cache_clears += 1
        self.close()

    def close(self):
        self.closed += 1
