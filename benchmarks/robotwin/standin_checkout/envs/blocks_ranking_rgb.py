from ._base_task import Base_Task


class blocks_ranking_rgb(Base_Task):
    def setup_demo(self, **kwags):
        super()._init_task_env_(**kwags)
