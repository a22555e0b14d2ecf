"""The simulator step's request: what a job body (evalwf.rules.jobs, in the workflow's interpreter) hands to
`python -m evalwf.job.sim_step` (evalwf.job.sim_step, in the benchmark's own interpreter), as one JSON file.

Both sides use these classes: the job body builds one and writes `to_json()`, the simulator step reads it back with
`request_from_json()`, which refuses a malformed request naming the field, so no side assembles or reads it key by
key. Standard library and evalwf.common only, Python >= 3.10: the simulator's interpreter imports it (the light core).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Union

from evalwf.common.json_types import JsonObject


@dataclass(frozen=True)
class ExternalServer:
    """An external policy server (`policy.url`) as its handshake before the batch found it: recorded in the result."""

    url: str
    metadata_digest: str


@dataclass(frozen=True)
class StopIfDropped:
    """A speculative batch of an adaptive sweep (adaptive.speculate_rounds): the step stops between episodes once
    one of `decisions` (the round decisions not yet written when it started) drops `policy`."""

    policy: str
    decisions: list[str] = field(hash=False)


@dataclass(frozen=True)
class BatchRequest:
    """Evaluate episodes [episode_start, episode_start + episode_count) of one task against the policy at
    `endpoint`; write the batch result JSON to `output` atomically."""

    kind: ClassVar[str] = "batch"
    run: str
    benchmark: str
    suite: str
    task: str
    episode_start: int
    episode_count: int
    section: JsonObject = field(hash=False)  # the benchmark's validated section: the step makes its settings again
    manifest_path: str
    manifest_hash: str
    endpoint: str
    infer_timeout_s: float
    policy_identity: str
    output: str
    artifacts_dir: str
    server_process: str | None = None  # the worker's policy server (`pid:start time`), verified before any observation
    policy_server: ExternalServer | None = None  # an external server (policy.url): its URL and metadata digest
    video_dir: str | None = None
    stop_if_dropped: StopIfDropped | None = None

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, **asdict(self)})


@dataclass(frozen=True)
class ManifestRequest:
    """Seal the manifest of one task and scope at `output` (and in `cache_dir`, when given)."""

    kind: ClassVar[str] = "manifest"
    benchmark: str
    definition: JsonObject = field(hash=False)  # what defines the episodes (evalwf.plan.manifest)
    scope: str
    task: str
    section: JsonObject = field(hash=False)
    output: str
    cache_dir: str | None = None

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, **asdict(self)})


SimRequest = Union[BatchRequest, ManifestRequest]  # noqa: UP007 (3.10)
REQUEST_CLASSES: dict[str, type[BatchRequest] | type[ManifestRequest]] = {
    BatchRequest.kind: BatchRequest,
    ManifestRequest.kind: ManifestRequest,
}

# What each field's JSON value must be (a float field takes an integer too; no field takes a boolean as a number).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "JsonObject": (dict,),
    "str | None": (str, type(None)),
    "ExternalServer | None": (dict, type(None)),
    "StopIfDropped | None": (dict, type(None)),
}


def request_from_json(text: str) -> SimRequest:
    """The request a job body wrote (`to_json`), checked field by field."""
    return request_from_data(json.loads(text))


def request_from_data(data: object) -> SimRequest:
    """A parsed JSON request as its class; a malformed one is refused (ValueError) naming the field."""
    if not isinstance(data, dict):
        raise ValueError(f"a simulator step request is a JSON object, not {type(data).__name__}")
    kind = data.get("kind")
    if kind not in REQUEST_CLASSES:
        raise ValueError(f"unknown request kind {kind!r}; known: {', '.join(REQUEST_CLASSES)}")
    cls = REQUEST_CLASSES[kind]
    declared = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(declared) - {"kind"})
    if unknown:
        raise ValueError(f"{kind} request: unknown field(s) {', '.join(map(repr, unknown))}")
    values: dict[str, object] = {}
    for name, spec in declared.items():
        if name not in data:
            if spec.default is None:  # optional: None when left out
                continue
            raise ValueError(f"{kind} request: field {name!r} is missing")
        value = data[name]
        expected = _FIELD_TYPES[str(spec.type)]
        if isinstance(value, bool) or not isinstance(value, expected):
            raise ValueError(
                f"{kind} request: field {name!r} must be {spec.type}, not {type(value).__name__} {value!r}"
            )
        if spec.type == "ExternalServer | None" and value is not None:
            value = _external_server(kind, name, value)
        if spec.type == "StopIfDropped | None" and value is not None:
            value = _stop_if_dropped(kind, name, value)
        if spec.type == "float":
            value = float(value)  # type: ignore[arg-type]
        values[name] = value
    return cls(**values)  # type: ignore[arg-type]


def _external_server(kind: str, name: str, value: dict) -> ExternalServer:  # type: ignore[type-arg]
    keys = {f.name for f in fields(ExternalServer)}
    if set(value) != keys or not all(isinstance(value[key], str) for key in keys):
        raise ValueError(f"{kind} request: field {name!r} must hold exactly the texts {sorted(keys)}, not {value!r}")
    return ExternalServer(**value)


def _stop_if_dropped(kind: str, name: str, value: dict) -> StopIfDropped:  # type: ignore[type-arg]
    policy, decisions = value.get("policy"), value.get("decisions")
    texts = isinstance(decisions, list) and all(isinstance(path, str) for path in decisions)
    if set(value) != {"policy", "decisions"} or not isinstance(policy, str) or not texts:
        raise ValueError(f"{kind} request: field {name!r} must hold a policy name and a list of decision paths")
    return StopIfDropped(policy, list(decisions))
