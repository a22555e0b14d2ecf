from ._base_task import Base_Task


class pick_dual_bottles(Base_Task):
    def setup_demo(self, **kwags):
        super()._init_task_env_(**kwags)
