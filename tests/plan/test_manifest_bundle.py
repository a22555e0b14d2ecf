"""Manifest bundles (evalwf.plan.bundle, `evalwf manifests export|import`): a run's sealed manifests exported from
one results directory and imported into a fresh clone's cache give that clone the same episodes, hence the same
per-episode records, even where a rebuild would not (instruction_rng: upstream draws other texts); a bundle with
any file changed is refused naming the file, and nothing is imported."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, standin_server

sys.path.insert(0, str(REPO / "tests" / "benchmarks" / "robotwin"))
from robotwin_testlib import ADAPTER, raw_section, run_batches, section, without_duration

from evalwf.common.errors import ManifestError
from evalwf.job import sim_step
from evalwf.plan.bundle import export_bundle, import_bundle
from evalwf.plan.manifest import manifest_hash, seal_manifest

TASK, SCOPE, SUITE = "click_bell", "demo_clean", "demo_clean-unseen"


def _run_with_manifest(results: Path, cache: Path) -> tuple[Path, dict]:
    """A run's sealed manifest where the workflow puts it (results/<run>/robotwin/manifests/<scope>/...)."""
    settings = section(episodes_per_task=4, instruction_rng="upstream")  # texts a rebuild would not reproduce
    definition = ADAPTER.manifest_definition(settings, SCOPE, TASK)
    output = results / "run" / "robotwin" / "manifests" / SCOPE / f"{TASK}.{manifest_hash(definition)}.json"
    return output, seal_manifest(ADAPTER, definition, SCOPE, TASK, output, cache)


def _evalwf(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalwf.cli.main", "manifests", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_bundle_gives_a_fresh_clone_the_same_episodes_and_records(tmp_path):
    first, manifest = _run_with_manifest(tmp_path / "lab1", tmp_path / "lab1-cache")
    bundle_file = tmp_path / "run.bundle"
    bundle = export_bundle(tmp_path / "lab1" / "run", bundle_file)
    assert export_bundle(tmp_path / "lab1" / "run", tmp_path / "again.bundle").digest == bundle.digest
    assert (tmp_path / "again.bundle").read_bytes() == bundle_file.read_bytes()  # content-addressed, byte-stable

    fresh_cache = tmp_path / "lab2-cache"
    imported, added = import_bundle(bundle_file, fresh_cache)
    assert imported.digest == bundle.digest and len(added) == 1
    assert (fresh_cache / "bundles" / f"{bundle.digest}.json").is_file()
    # the fresh clone's workflow restores the manifest from its cache by hash instead of building one
    second, restored = _run_with_manifest(tmp_path / "lab2", fresh_cache)
    assert second.read_bytes() == first.read_bytes()
    settings = section(episodes_per_task=4, instruction_rng="upstream")
    records = [without_duration(run_batches(settings, SUITE, TASK, m, 2, tmp_path)) for m in (manifest, restored)]
    assert records[0] == records[1]
    assert import_bundle(bundle_file, fresh_cache)[1] == []  # importing again adds nothing

    # a batch job in the fresh clone (the simulator step, against a real policy server) names the bundle
    assert second.with_suffix(".bundle").read_text().strip() == bundle.digest
    with standin_server("--action-dim", "14", "--noise", "0.6") as url:
        for manifest_path, name in ((first, "lab1.json"), (second, "lab2.json")):
            sim_step.run_request(
                {"kind": "batch", "run": "run", "benchmark": "robotwin", "suite": SUITE, "task": TASK,
                 "episode_start": 0, "episode_count": 2, "manifest_path": str(manifest_path),
                 "manifest_hash": restored["manifest_hash"], "endpoint": url, "infer_timeout_s": 30,
                 "policy_identity": "p", "output": str(tmp_path / name), "artifacts_dir": str(tmp_path / "art"),
                 "section": raw_section(episodes_per_task=4, instruction_rng="upstream")}
            )  # fmt: skip
    lab1, lab2 = (json.loads((tmp_path / name).read_text()) for name in ("lab1.json", "lab2.json"))
    assert "manifest_bundle" not in lab1 and lab2["manifest_bundle"] == bundle.digest
    assert without_duration(lab1["episodes"]) == without_duration(lab2["episodes"])


def test_a_tampered_bundle_is_refused_naming_the_file(tmp_path):
    _run_with_manifest(tmp_path / "lab1", tmp_path / "lab1-cache")
    bundle_file = tmp_path / "run.bundle"
    done = _evalwf("export", str(tmp_path / "lab1" / "run"), "-o", str(bundle_file))
    assert done.returncode == 0 and "1 manifest(s), bundle sha256 " in done.stdout, done.stderr
    with tarfile.open(bundle_file) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    (name,) = [n for n in members if n.startswith("manifests/")]
    text = json.loads(members[name])
    text["episodes"][0]["instruction_unseen"] = "do something else"
    members[name] = json.dumps(text, indent=1, sort_keys=True).encode() + b"\n"
    tampered = tmp_path / "tampered.bundle"
    with tarfile.open(tampered, "w") as archive:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    cache = tmp_path / "lab2-cache"
    refused = _evalwf("import", str(tampered), "--cache", str(cache))
    assert refused.returncode == 1
    assert f"{name} does not match its bundle.json" in refused.stderr and "nothing imported" in refused.stderr
    assert not cache.exists()
    # the index rewritten to match: the manifest's own content digest still catches it
    index = json.loads(members["bundle.json"])
    index["files"][0].update(sha256=hashlib.sha256(members[name]).hexdigest(), bytes=len(members[name]))
    members["bundle.json"] = json.dumps(index).encode()
    with tarfile.open(tampered, "w") as archive:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with pytest.raises(ManifestError, match=rf"{name}: .*modified after sealing"):
        import_bundle(tampered, cache)
    assert not cache.exists()
    ok = _evalwf("import", str(bundle_file), "--cache", str(cache))
    assert ok.returncode == 0 and "verified; 1 manifest(s)" in ok.stdout, ok.stderr
