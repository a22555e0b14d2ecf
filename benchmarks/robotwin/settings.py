"""RoboTwin's settings: made from benchmarks/robotwin/schema.yaml, their one declaration (keys, types, defaults).

No defaults here: the schema gives them (evalwf.benchmark.settings)."""

from __future__ import annotations

from evalwf.benchmark.settings import settings_class

RobotwinSettings = settings_class("RobotwinSettings", __name__)
