from ._base_task import Base_Task


class place_object_basket(Base_Task):
    def setup_demo(self, **kwags):
        super()._init_task_env_(**kwags)
