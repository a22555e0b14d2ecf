"""The Labtasker profile lets Snakemake queue a full campaign (1400 batches) at once: enough jobs, and a
submission rate that does not throttle it (Snakemake's default, 100 jobs per second, took 14 s for 1400)."""

from __future__ import annotations

from pathlib import Path

import yaml
from snakemake.settings.types import MaxJobsPerTimespan

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "labtasker" / "config.yaml"
FULL_CAMPAIGN = 1400  # LIBERO 400 + RoboTwin 1000 batches


def test_the_profile_queues_a_full_campaign_without_throttling() -> None:
    profile = yaml.safe_load(PROFILE.read_text())
    assert profile["jobs"] >= FULL_CAMPAIGN
    rate = MaxJobsPerTimespan.parse_choice(profile["max-jobs-per-timespan"])
    assert rate.max_jobs / rate.timespan >= FULL_CAMPAIGN / 2  # the whole campaign within 2 s of throttling
