"""Stand-in of RoboTwin's envs/utils/action.py: only ArmTag, the arm name the task files keep on the env.

Behaves like upstream's: one instance per arm ("left" / "right"), equal to its name as a string, str() is the
name, .opposite is the other arm; anything else raises ValueError.
"""

__all__ = ["ArmTag"]


class ArmTag:
    _instances = {}

    def __new__(cls, value):
        if isinstance(value, ArmTag):
            return value
        name = value.lower() if isinstance(value, str) else None
        if name not in ("left", "right"):
            raise ValueError(f"Invalid arm tag: {value}. Must be 'left' or 'right'.")
        if name not in cls._instances:
            instance = super().__new__(cls)
            instance.arm = name
            cls._instances[name] = instance
        return cls._instances[name]

    @property
    def opposite(self):
        return ArmTag("right" if self.arm == "left" else "left")

    def __eq__(self, other):
        if isinstance(other, ArmTag):
            return self.arm == other.arm
        if isinstance(other, str):
            return self.arm == other.lower()
        return False

    def __hash__(self):
        return hash(self.arm)

    def __repr__(self):
        return f"ArmTag('{self.arm}')"

    def __str__(self):
        return self.arm
