__all__ = ["UnStableError"]


class UnStableError(Exception):
    """The scene's objects did not settle (raised from setup_demo)."""

    def __init__(self, msg):
        super().__init__(msg)
