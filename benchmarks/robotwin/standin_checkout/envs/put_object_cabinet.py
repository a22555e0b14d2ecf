import numpy as np

from ._base_task import ARM_JOINTS, Base_Task
from .utils import ArmTag

LIFT = np.float32(0.05)  # how far the object rises when the arm has put it into the drawer


class put_object_cabinet(Base_Task):
    """As upstream: play_once keeps the arm (self.arm_tag) and the object's height before the expert moves it
    (self.origin_z, a float32 like a SAPIEN pose) on the env; check_success reads both, so it raises
    AttributeError on an env whose play_once never ran, and compares the object's height with origin_z."""

    def setup_demo(self, **kwags):
        super()._init_task_env_(**kwags, table_static=False)

    def object_z(self):
        table_top = np.float32(0.741 + self.table_z_bias)
        return table_top + LIFT if self.joints_reached() else table_top

    def play_once(self):
        self.arm_tag = ArmTag(self.arm)
        self.origin_z = self.object_z()
        return super().play_once()

    def success_joints(self):
        return ARM_JOINTS[str(self.arm_tag)]

    def check_success(self):
        lift = self.object_z() - self.origin_z
        return bool(0.007 < lift < 0.12 and self.joints_reached())
