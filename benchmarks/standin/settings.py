"""The stand-in's settings: made from benchmarks/standin/schema.yaml, their one declaration (keys, types, defaults).

No defaults here: the schema gives them (evalwf.benchmark.settings)."""

from __future__ import annotations

from evalwf.benchmark.settings import settings_class

StandinSettings = settings_class("StandinSettings", __name__)
