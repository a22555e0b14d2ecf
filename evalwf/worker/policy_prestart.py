"""A worker started with its campaign's config files (--configfile) starts their policy's server at once, beside its
node checks and while its slots already claim, so that the first batch of each worker finds the policy loaded
instead of waiting for it (a real VLA loads for minutes; the first batches of a campaign are its longest).

Only an optimisation: a start that fails here is logged and charged to nobody (no batch was claimed for it, no
circuit breaker counts it); the first batch of that policy then starts the server as it always does, guarded by
its breaker. Nothing is started for config files that another user could change, that configure no policy or an
external one (policy.url), or several (a sweep: which one comes first is the queue's choice).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from evalwf.common.errors import ConfigError
from evalwf.contract.allowed_files import changeable_refusal
from evalwf.policy.client import PolicyServerError
from evalwf.policy.spec import PolicySpec
from evalwf.worker.shared_server import SharedPolicyServer, Stopping


def policy_to_prestart(configfiles: list[str]) -> tuple[PolicySpec | None, str]:
    """The one policy these config files have this worker serve, or None, with what to log either way."""
    from evalwf.plan.config import gives_a_policy, load_config

    for path in configfiles:
        refusal = changeable_refusal(path, "config file")
        if refusal is not None:
            return None, f"no policy server started at start: {refusal}"
    try:
        if not gives_a_policy(*configfiles):
            return None, "the config files name no policy: its server starts with the first batch"
        policies = load_config(*configfiles).policies
    except (ConfigError, OSError) as error:
        return None, f"no policy server started at start: the config files are not a campaign's ({error})"
    served = [spec for spec in policies if not spec.external]
    if len(served) != 1:
        why = "an external server (policy.url)" if policies and not served else f"{len(served)} policies"
        return None, f"no policy server started at start: the config files name {why}"
    return served[0], f"starting policy server {served[0].identity} at start (--configfile), before the first batch"


def prestart_policy_server(
    server: SharedPolicyServer, spec: PolicySpec, stop: threading.Event, log: Callable[[str], None]
) -> threading.Thread:
    """Start `spec`'s server in the background; a slot that claims a batch of it meanwhile waits for this start
    (SharedPolicyServer serialises starts), one of another policy restarts the server as it would anyway."""

    def start() -> None:
        try:
            with server.lease(spec, stop):
                pass
        except Stopping:
            return
        except PolicyServerError as error:
            if not stop.is_set():
                first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
                log(f"policy server {spec.identity} did not start at start ({first_line}): its first batch starts it")

    thread = threading.Thread(target=start, name="policy-prestart", daemon=True)
    thread.start()
    return thread
