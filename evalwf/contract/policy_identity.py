"""Whether a batch may be evaluated by what serves a given policy identity: the one comparison of policy identities
(evalwf.policy.spec.PolicySpec.identity, `name@hash`) that decides it, for the worker (the task's identity against
its campaign's plan, its running server against the batch's policy) and for the job step (the server its worker
leased against the batch's policy), and the same comparison for the result reader's trust check
(evalwf.plan.results). Each caller words its refusal for what it compares; none compares identities by hand.

Standard library only: the light core imports it on Python 3.10 (the batch result reader runs in a simulator's
interpreter).
"""

from __future__ import annotations

from collections.abc import Callable

# Words a refusal from (served, needed): the identities compared, None where there is no policy.
RefusalWording = Callable[[str | None, str | None], str]


def worker_server_refusal(served: str | None, needed: str | None) -> str:
    """The job step's wording: the worker's policy server is not the batch's policy."""
    return f"the worker's policy server serves {served}, but this batch needs {needed}"


def serving_refusal(
    served: str | None, needed: str | None, wording: RefusalWording = worker_server_refusal
) -> str | None:
    """Why a batch of the policy `needed` may not be evaluated by what serves the policy `served` (None on either
    side: no policy), worded by `wording`; None when it may: only the same identity serves a batch, so results of
    different policies never mix."""
    if served == needed:
        return None
    return wording(served, needed)
