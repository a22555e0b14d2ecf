"""The policy block of a config: how to start (or where to reach) a policy server, and the identity that tags
every result.

Two kinds of policy:
- `command`: a server that a worker (or a local batch) starts on a loopback port it owns. Identity: name, command,
  env, protocol, checkpoint.
- `url`: a server that is already running (locally or on a remote GPU box). Identity: name, protocol, checkpoint
  (the URL is where it runs, not what it computes: moving the server reruns nothing); before each batch the
  server's openpi metadata is read (health check) and recorded in the batch result, and the summary refuses to
  mix batches whose servers said different things (evalwf.plan.results.check_policy_servers).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from evalwf.common.hashing import jsonable, short_hash
from evalwf.policy.schema import PolicyBlock, policy_defaults
from evalwf.policy.wire import Message

# Keys that change what the policy computes; the startup and inference timeouts and similar operational knobs do not.
IDENTITY_KEYS = ("name", "command", "env", "protocol", "checkpoint")
EXTERNAL_IDENTITY_KEYS = ("name", "protocol", "checkpoint", "external")
# What a worker hands a job step as its endpoint for an external policy: "use policy.url of the config".
EXTERNAL_ENDPOINT = "external:policy.url"
# Metadata keys that change with every start of the same server (the stand-in's pid): left out of its digest.
VOLATILE_METADATA_KEYS = ("pid", "server_timing", "started_at", "hostname", "host")


@dataclass(frozen=True)
class PolicySpec:
    name: str
    command: str | None  # template with {port}, {gpu} and {python} (the interpreter running the workflow)
    env: dict[str, str]
    startup_timeout_s: float
    infer_timeout_s: float  # how long a batch waits for one answer (operational: not part of the identity)
    protocol: str
    checkpoint: str | None
    url: str | None  # an already running server: ws://host:port
    external: bool  # true for a url policy (also in the block a task carries, which has no url)
    max_batch: int | None  # requests per forward pass; None: the worker's slots (operational)
    max_wait_ms: float  # the server's wait for more requests of a batch (operational)

    @classmethod
    def from_config(cls, block: PolicyBlock) -> PolicySpec:
        """From the config's policy block, or the block a task carries to a worker; keys it leaves out take the
        schema's defaults (evalwf/policy/policy.schema.yaml)."""
        block = {**policy_defaults(), **block}
        command, url = block.get("command"), block.get("url")
        external = url is not None or bool(block.get("external"))
        if command is None and not external:
            raise KeyError("policy needs 'command' (a server to start) or 'url' (a running server)")
        return cls(
            name=block["name"],
            command=command,
            env={str(k): str(v) for k, v in block["env"].items()},
            startup_timeout_s=float(block["startup_timeout_s"]),
            infer_timeout_s=float(block["infer_timeout_s"]),
            protocol=block["protocol"],
            checkpoint=block["checkpoint"],
            url=url,
            external=external,
            max_batch=block["max_batch"],
            max_wait_ms=float(block["max_wait_ms"]),
        )

    def to_dict(self) -> PolicyBlock:
        return {
            "name": self.name,
            "command": self.command,
            "url": self.url,
            "external": self.external,
            "env": dict(self.env),
            "startup_timeout_s": self.startup_timeout_s,
            "infer_timeout_s": self.infer_timeout_s,
            "protocol": self.protocol,
            "checkpoint": self.checkpoint,
            "max_batch": self.max_batch,
            "max_wait_ms": self.max_wait_ms,
        }

    def identity_block(self) -> PolicyBlock:
        """The keys that define what the policy computes (a change reruns its batches); operational knobs such as
        the startup timeout, or where an external server runs, are left out so that changing them never redoes
        finished work. This block is also what a task carries to its worker."""
        full = self.to_dict()
        return {k: full[k] for k in (EXTERNAL_IDENTITY_KEYS if self.external else IDENTITY_KEYS)}

    @property
    def identity(self) -> str:
        """Results of different policies never mix: this hash is written into and checked on every batch."""
        return f"{self.name}@{short_hash(self.identity_block())}"

    def batch_limit(self, slots: int) -> int:
        """Requests per forward pass for a server shared by `slots` job slots: max_batch, else one per slot."""
        return int(self.max_batch) if self.max_batch is not None else max(1, int(slots))

    def render_command(self, port: int, gpu: str, slots: int = 1) -> str:
        """`gpu` is the worker's physical GPU label (what CUDA_VISIBLE_DEVICES holds for the server). Inside the
        server only those GPUs are visible, numbered from 0: {gpu} is that index (what `cuda:{gpu}` needs),
        {gpu_physical} the label itself. {max_batch} / {max_wait_ms}: how the server batches the requests of the
        `slots` job slots sharing it."""
        if self.command is None:
            raise ValueError(f"policy {self.name} is an external server (policy.url): there is nothing to start")
        labels = [label for label in str(gpu).split(",") if label.strip()] or ["0"]
        visible = ",".join(str(index) for index in range(len(labels)))
        return self.command.format(
            port=port,
            gpu=visible,
            gpu_physical=",".join(labels),
            python=sys.executable,
            max_batch=self.batch_limit(slots),
            max_wait_ms=f"{self.max_wait_ms:g}",
        )


def metadata_digest(metadata: Message) -> str:
    """What an external server says it serves, as a short hash (volatile keys such as a pid left out)."""
    stable = {str(k): v for k, v in metadata.items() if str(k) not in VOLATILE_METADATA_KEYS}
    return short_hash(jsonable(stable))
