"""Sealed manifests: what defines a task's evaluated episodes, fixed once and named by the hash of its
definition.

A manifest is built once per definition (cached across runs), published atomically and never rewritten:
queued batches point to it by hash, and every batch result is checked against it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from evalwf.benchmark.adapter import BenchmarkAdapter
from evalwf.common.atomic import publish_once
from evalwf.common.errors import ManifestError
from evalwf.common.hashing import sha256_hex, short_hash
from evalwf.common.json_types import JsonValue

# What defines a manifest's episodes (its name hashes it): keys its adapter chooses (evalwf.benchmark.adapter:
# manifest_definition), plus `environment` (evalwf.plan.environment.EnvironmentRecord) where it declares one.
ManifestDefinition = dict[str, JsonValue]


class ManifestDocument(TypedDict):
    """A sealed manifest file (results/<run>/<benchmark>/manifests/<scope>/<task>.<hash>.json)."""

    schema: str
    schema_version: int
    benchmark: str
    scope: str
    task: str
    manifest_hash: str
    definition: ManifestDefinition
    episodes: list[dict[str, JsonValue]]  # one per episode, `index` 0..n-1: what fixes it (seed, init state, text)
    extra: dict[str, JsonValue]
    content_sha256: str


MANIFEST_SCHEMA = "policy-eval.manifest"
MANIFEST_SCHEMA_VERSION = 1


def manifest_hash(definition: ManifestDefinition) -> str:
    """The manifest's name: a hash of everything that defines its episodes.

    Keys starting with "_" are where to find things on this host (e.g. a simulator checkout path), not what
    defines the episodes: they are recorded but not hashed, so moving a checkout keeps the manifest.
    """
    return short_hash({k: v for k, v in definition.items() if not k.startswith("_")}, 16)


def _content_digest(manifest: ManifestDocument) -> str:
    return sha256_hex({k: manifest[k] for k in ("definition", "episodes", "extra")})


def build_manifest_document(
    adapter: BenchmarkAdapter,
    definition: ManifestDefinition,
    scope: str,
    task: str,
    log: Callable[[str], None] = print,
) -> ManifestDocument:
    body = adapter.build_manifest(definition, log)
    indices = [ep.get("index") for ep in body.episodes]
    if indices != list(range(len(indices))):
        raise ManifestError(f"{adapter.name} manifest for {scope}/{task}: episode indices are not 0..n-1")
    document: ManifestDocument = {
        "schema": MANIFEST_SCHEMA,
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "benchmark": adapter.name,
        "scope": scope,
        "task": task,
        "manifest_hash": manifest_hash(definition),
        "definition": definition,
        "episodes": body.episodes,
        "extra": body.extra,
        "content_sha256": "",
    }  # no build time or host: a rebuild anywhere gives the same bytes (invariant 13)
    document["content_sha256"] = _content_digest(document)
    return document


def load_manifest(path: str | os.PathLike[str], expected_hash: str | None = None) -> ManifestDocument:
    """Load and verify a sealed manifest (hash of definition, content digest, episode indices)."""
    source = Path(path)
    try:
        manifest = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"manifest {source} does not exist; rerun snakemake to build it") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"manifest {source} is unreadable ({exc}); delete it and rerun to rebuild") from exc
    try:
        if manifest.get("schema") != MANIFEST_SCHEMA or manifest.get("schema_version") != MANIFEST_SCHEMA_VERSION:
            raise ManifestError(f"manifest {source}: not a v{MANIFEST_SCHEMA_VERSION} {MANIFEST_SCHEMA} file")
        actual = manifest_hash(manifest["definition"])
        if manifest["manifest_hash"] != actual:
            raise ManifestError(
                f"manifest {source}: manifest_hash {manifest['manifest_hash']} != hash of definition {actual}"
            )
        if expected_hash is not None and actual != expected_hash:
            raise ManifestError(f"manifest {source}: hash {actual}, but the batch expects {expected_hash}")
        if manifest["content_sha256"] != _content_digest(manifest):
            raise ManifestError(
                f"manifest {source}: content does not match its content_sha256 (modified after sealing)"
            )
    except KeyError as exc:
        raise ManifestError(f"manifest {source}: missing key {exc}") from None
    return manifest


BUNDLE_SUFFIX = ".bundle"  # beside a manifest: the hash of the bundle it was imported from (evalwf.plan.bundle)


def manifest_bundle(path: str | os.PathLike[str]) -> str | None:
    """The hash of the bundle a manifest came from (`evalwf manifests import`), None where it was built here."""
    sidecar = Path(path).with_suffix(BUNDLE_SUFFIX)
    return sidecar.read_text(encoding="utf-8").strip() or None if sidecar.is_file() else None


def _publish_from_cache(cached: Path, target: Path) -> None:
    """A cached manifest published at `target`, with the name of the bundle it came from when it was imported."""
    bundle = manifest_bundle(cached)
    if bundle is not None:
        publish_once(target.with_suffix(BUNDLE_SUFFIX), bundle + "\n")
    publish_once(target, cached.read_text(encoding="utf-8"))


def restore_cached_manifest(
    benchmark: str, digest: str, output: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None
) -> bool:
    """Put a missing sealed manifest back from the content-addressed cache (same digest, verified), without
    building anything. The workflow does this before it plans jobs: a batch depends on its manifest, so a
    manifest that had to be rebuilt would rerun every finished batch of its task, although it comes back byte
    for byte. Returns whether `output` exists afterwards."""
    target = Path(output)
    if target.exists():
        return True
    cached = Path(cache_dir) / benchmark / f"{digest}.json" if cache_dir else None
    if cached is None or not cached.exists():
        return False
    try:
        load_manifest(cached, digest)
    except ManifestError:
        return False  # a damaged cache entry: the manifest job rebuilds it and says why
    _publish_from_cache(cached, target)
    return True


def seal_manifest(
    adapter: BenchmarkAdapter,
    definition: ManifestDefinition,
    scope: str,
    task: str,
    output: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
) -> ManifestDocument:
    """Make the sealed manifest for `definition` exist at `output`, reusing the cache when it has it.

    An existing valid file at `output` is kept as it is; a cached copy is reused; only otherwise is the
    manifest built (which may run the simulator), then published to the cache and to `output`.
    """
    expected = manifest_hash(definition)
    target = Path(output)
    if target.exists():
        return load_manifest(target, expected)
    cached = Path(cache_dir) / adapter.name / f"{expected}.json" if cache_dir else None
    if cached is not None and cached.exists():
        load_manifest(cached, expected)
        _publish_from_cache(cached, target)
        return load_manifest(target, expected)
    document = build_manifest_document(adapter, definition, scope, task, log)
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    if cached is not None and not cached.exists():
        publish_once(cached, text)
    publish_once(target, text)
    return load_manifest(target, expected)
