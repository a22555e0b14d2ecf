from ._base_task import ARM_JOINTS, Base_Task
from .utils import ArmTag


class open_laptop(Base_Task):
    """As upstream: play_once chooses the arm from the scene and keeps it on the env (self.arm_tag); check_success
    reads it, so it raises AttributeError on an env whose play_once never ran."""

    def setup_demo(self, is_test=False, **kwags):
        super()._init_task_env_(**kwags)

    def play_once(self):
        self.arm_tag = ArmTag(self.arm)
        return super().play_once()

    def success_joints(self):
        return ARM_JOINTS[str(self.arm_tag)]
