from ._base_task import Base_Task


class stack_blocks_three(Base_Task):
    def setup_demo(self, **kwags):
        super()._init_task_env_(**kwags)
