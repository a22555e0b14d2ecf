"""Sealed manifests and layered batch-result validation."""

from __future__ import annotations

import json

import pytest

from evalwf.benchmark.adapter import get_adapter
from evalwf.benchmark.batches import EpisodeRange
from evalwf.benchmark.rollout import episode_record
from evalwf.common.errors import ManifestError, ResultValidationError
from evalwf.plan.manifest import load_manifest, manifest_hash, seal_manifest
from evalwf.plan.results import BatchExpectation, build_batch_result, validate_batch_result, write_batch_result

DEFINITION = {
    "benchmark": "standin",
    "suite": "alpha",
    "task": "reach",
    "num_episodes": 4,
    "base_seed": 0,
    "simulator": "standin-v1",
}


@pytest.fixture
def manifest(tmp_path):
    adapter = get_adapter("standin")
    path = tmp_path / "m" / f"reach.{manifest_hash(DEFINITION)}.json"
    return seal_manifest(adapter, DEFINITION, "alpha", "reach", path, tmp_path / "cache")


def test_manifest_is_sealed_and_cached(tmp_path, manifest):
    path = tmp_path / "m" / f"reach.{manifest_hash(DEFINITION)}.json"
    first = path.read_bytes()
    again = seal_manifest(get_adapter("standin"), DEFINITION, "alpha", "reach", path, tmp_path / "cache")
    assert path.read_bytes() == first and again == manifest
    cached = tmp_path / "cache" / "standin" / f"{manifest_hash(DEFINITION)}.json"
    assert cached.read_bytes() == first
    other = tmp_path / "other" / path.name
    seal_manifest(get_adapter("standin"), DEFINITION, "alpha", "reach", other, tmp_path / "cache")
    assert other.read_bytes() == first, "a second run reuses the cached manifest byte for byte"


def test_tampered_manifest_is_rejected(tmp_path, manifest):
    path = tmp_path / "m" / f"reach.{manifest_hash(DEFINITION)}.json"
    data = json.loads(path.read_text())
    data["episodes"][1]["seed"] += 1
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="modified after sealing"):
        load_manifest(path)
    with pytest.raises(ManifestError, match="expects"):
        load_manifest(tmp_path / "cache" / "standin" / f"{manifest_hash(DEFINITION)}.json", "0" * 16)


FIRST_TWO = EpisodeRange(0, 2)


def make_result(manifest, episodes=FIRST_TWO, **changes):
    records = [
        episode_record(
            index=i,
            seed=manifest["episodes"][i]["seed"],
            setup={"instruction": manifest["episodes"][i]["instruction"]},
            success=i % 2 == 0,
            steps=3,
            duration_s=0.1,
        )
        for i in episodes.indices()
    ]
    result = build_batch_result(
        run="r",
        benchmark="standin",
        suite="alpha",
        task="reach",
        episodes=episodes,
        manifest_hash=manifest["manifest_hash"],
        policy_identity="p@1",
        records=records,
        started_at="a",
        finished_at="b",
        duration_s=1.0,
    )
    result.update(changes)
    return result


def expectation(manifest, episodes=FIRST_TWO):
    return BatchExpectation("standin", "alpha", "reach", episodes, manifest, "p@1", ("instruction",))


def test_valid_result_passes(tmp_path, manifest):
    path = tmp_path / "b.json"
    write_batch_result(path, make_result(manifest))
    assert validate_batch_result(path, expectation(manifest))["success_count"] == 1


@pytest.mark.parametrize(
    ("corrupt", "reason"),
    [
        (lambda r: r.update(schema_version=0), "schema_version"),
        (lambda r: r.update(success_count=2), "success_count 2 != sum of episode success flags 1"),
        (lambda r: r["episodes"].pop(), "episode indices"),
        (lambda r: r.update(manifest_hash="f" * 16), "manifest_hash"),
        (lambda r: r.update(policy_identity="other@2"), "policy_identity"),
        (lambda r: r["episodes"][0].update(seed=1), "seed 1 != manifest seed"),
        (lambda r: r["episodes"][1]["setup"].update(instruction="jump"), "setup instruction='jump'"),
        (lambda r: r["episodes"][0].pop("success"), "schema violation"),
        (lambda r: r.update(task="push"), "task is 'push'"),
    ],
)
def test_bad_result_is_named(tmp_path, manifest, corrupt, reason):
    result = make_result(manifest)
    corrupt(result)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(result))
    with pytest.raises(ResultValidationError) as error:
        validate_batch_result(path, expectation(manifest))
    assert str(path) in str(error.value) and reason in str(error.value)


def test_truncated_file_is_named(tmp_path, manifest):
    path = tmp_path / "torn.json"
    path.write_text(json.dumps(make_result(manifest))[:50])
    with pytest.raises(ResultValidationError, match="not readable JSON"):
        validate_batch_result(path, expectation(manifest))
