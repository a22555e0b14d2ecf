"""The JSON records an adapter writes and reads, typed once for every side: the episodes of a sealed manifest, the
manifest itself, the per-episode record of a batch result, and the policy's request and reply as a benchmark
builds and reads them. Standard library and numpy only (the light core, Python 3.10).

Each is a TypedDict: they travel as JSON files (manifests, batch results) and msgpack messages, and their
schemas are evalwf/plan/batch_result.schema.json and evalwf.plan.manifest.
"""

from __future__ import annotations

from typing import Protocol, TypedDict, TypeVar, Union

import numpy as np

from evalwf.common.json_types import JsonObject


class ManifestEpisode(TypedDict):
    """One episode a manifest fixes; a benchmark adds its own setup fields (LIBERO: init_state_index, RoboTwin:
    instruction; each benchmark's subclass of this)."""

    index: int
    seed: int


class Manifest(TypedDict):
    """A sealed manifest (evalwf.plan.manifest.build_manifest_document)."""

    schema: str
    schema_version: int
    benchmark: str
    scope: str
    task: str
    manifest_hash: str
    definition: JsonObject
    episodes: list[ManifestEpisode]
    extra: JsonObject
    content_sha256: str


class _EpisodeTimings(TypedDict, total=False):
    reset_s: float  # of duration_s, the seconds before the policy's first step, where a benchmark measures them


class EpisodeRecord(_EpisodeTimings):
    """One episode of a batch result (evalwf.benchmark.rollout.episode_record builds it)."""

    index: int
    seed: int
    setup: JsonObject  # the manifest's values of the adapter's record_setup_keys
    success: bool
    steps: int
    duration_s: float
    error: str | None
    extra: JsonObject


# A policy request as a benchmark builds it (openpi's format: images and states as arrays, the prompt as text,
# nested groups of them, e.g. RoboTwin's "images" by camera) and the reply it reads ("actions": [horizon, dim]).
PolicyValue = Union[np.ndarray, str, int, float, "dict[str, PolicyValue]"]
PolicyMessage = dict[str, PolicyValue]


ObservationT = TypeVar("ObservationT", contravariant=True)


class Policy(Protocol[ObservationT]):
    """What a rollout asks a policy: evalwf.policy.client.PolicyClient or the TaggedPolicy wrapping it (a request
    in, a reply out: Policy[PolicyMessage]), or a benchmark's wrapper that maps its simulator's observation to a
    request (RoboTwin's _MappedPolicy)."""

    def infer(self, observation: ObservationT) -> PolicyMessage: ...
