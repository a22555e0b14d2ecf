"""LIBERO's settings: made from benchmarks/libero/schema.yaml, their one declaration (keys, types, defaults).

No defaults here: the schema gives them (evalwf.benchmark.settings)."""

from __future__ import annotations

from evalwf.benchmark.settings import settings_class

LiberoSettings = settings_class("LiberoSettings", __name__)
