from .action import ArmTag
from .create_actor import UnStableError

__all__ = ["ArmTag", "UnStableError"]
