"""What a worker tells the job step it starts, in one typed object: the policy server it leased for the step (its
endpoint, the identity it serves and its process, which the step's client checks answers) and where the step's job
body writes the exception it fails with (evalwf.contract.failure).

The worker serialises it once into one environment variable (JOB_STEP_CONTEXT_ENV); the job body reads it with
`JobStepContext.from_environ()`. Outside a worker (the local profile, a test) there is none. Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from evalwf.contract.policy_identity import serving_refusal

JOB_STEP_CONTEXT_ENV = "EVAL_JOB_STEP_CONTEXT"


@dataclass(frozen=True)
class JobStepContext:
    """None where the worker has nothing to say: a job that evaluates no policy has no server; an external policy
    (`policy.url`) has no endpoint or process of the worker's."""

    policy_identity: str | None = None  # the identity of the policy the worker's server serves for this step
    endpoint: str | None = None  # that server's endpoint (ws://127.0.0.1:<port>)
    server_process: str | None = None  # that server's process, `pid:start time` (evalwf.policy.peer)
    cause_file: str | None = None  # where the job body writes the exception it fails with

    def __post_init__(self) -> None:
        if self.endpoint is not None and self.policy_identity is None:
            raise ValueError(
                f"field 'policy_identity' is missing beside the endpoint {self.endpoint}: a policy server is handed "
                "over with the identity it serves, which the job step checks against its batch's policy"
            )

    def to_env(self) -> dict[str, str]:
        """The one environment variable a job step inherits it through."""
        return {JOB_STEP_CONTEXT_ENV: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> JobStepContext | None:
        """The context the worker gave this job step; None outside a worker. A malformed one is refused naming the
        variable and the field (ValueError)."""
        text = (os.environ if environ is None else environ).get(JOB_STEP_CONTEXT_ENV)
        if not text:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{JOB_STEP_CONTEXT_ENV} is not JSON ({error}): {text[:200]!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{JOB_STEP_CONTEXT_ENV} must be a JSON object, not {text[:200]!r}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{JOB_STEP_CONTEXT_ENV}: unknown field(s) {', '.join(map(repr, unknown))}")
        for name in names & set(data):
            if data[name] is not None and not isinstance(data[name], str):
                raise ValueError(f"{JOB_STEP_CONTEXT_ENV}: field {name!r} must be a text or null, not {data[name]!r}")
        try:
            return cls(**data)
        except ValueError as error:
            raise ValueError(f"{JOB_STEP_CONTEXT_ENV}: {error}") from None

    def serving(self, identity: str) -> str | None:
        """Why the worker's server cannot serve a batch of the policy `identity` (the job step's side of the one
        comparison, evalwf.contract.policy_identity); None when it can or the worker leased none."""
        if self.policy_identity is None:
            return None
        return serving_refusal(self.policy_identity, identity)
