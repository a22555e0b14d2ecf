"""evalwf.contract.policy_identity: the one comparison that decides whether a batch may be evaluated by what serves a
policy identity, worded by its caller."""

from __future__ import annotations

from evalwf.contract.policy_identity import serving_refusal

A = "standin-policy@0123456789abcdef"
B = "standin-policy@fedcba9876543210"


def test_only_the_same_identity_serves_a_batch():
    assert serving_refusal(A, A) is None
    assert serving_refusal(None, None) is None  # no policy served, none needed (a manifest job)
    refusal = serving_refusal(A, B)
    assert refusal is not None and f"serves {A}" in refusal and f"needs {B}" in refusal
    # a policy where none is needed, and none where one is needed, are refused alike
    assert serving_refusal(A, None) is not None and serving_refusal(None, B) is not None


def test_the_caller_words_the_refusal_from_what_was_compared():
    said: list[tuple[str | None, str | None]] = []

    def wording(served: str | None, needed: str | None) -> str:
        said.append((served, needed))
        return f"recorded {served}, configured {needed}"

    assert serving_refusal(B, A, wording) == f"recorded {B}, configured {A}"
    assert serving_refusal(A, A, wording) is None
    assert said == [(B, A)]  # worded only when refused
