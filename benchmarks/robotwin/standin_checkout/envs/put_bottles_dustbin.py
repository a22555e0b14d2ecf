from ._base_task import Base_Task


class put_bottles_dustbin(Base_Task):
    def setup_demo(self, **kwags):
        super()._init_task_env_(table_xy_bias=[0.3, 0], **kwags)
