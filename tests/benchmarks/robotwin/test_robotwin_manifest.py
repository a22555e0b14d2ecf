"""Manifests: the upstream expert-check scan, sealed once, never rewritten; RNG isolation of the builder."""

from __future__ import annotations

import importlib
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from robotwin_testlib import (
    ADAPTER,
    STANDIN_PATH,
    InProcessPolicy,
    build,
    raw_section,
    run_batches,
    same_numpy_state,
    section,
    upstream_sequential_loop,
)

from benchmarks.robotwin.checkout import RobotwinCheckout
from evalwf.benchmark.batches import EpisodeRange
from evalwf.common.errors import ManifestError, ResultValidationError
from evalwf.plan.manifest import load_manifest, seal_manifest
from evalwf.plan.results import BatchExpectation, build_batch_result, validate_batch_result, write_batch_result


def _cache_clears() -> int:
    """The stand-in's count of close_env(clear_cache=True), read from the stand-in checkout's own module (a test
    before may have imported another checkout's `envs`)."""
    with RobotwinCheckout(STANDIN_PATH).activated():
        return importlib.import_module("envs._base_task").Base_Task.cache_clears


CASES = [
    ("demo_clean", "click_bell", 0),
    ("demo_clean", "stack_blocks_two", 1),
    ("demo_randomized", "beat_block_hammer", 0),
    ("demo_randomized", "dump_bin_bigbin", 0),  # clutter-drift task: the builder replays upstream's setups
    ("demo_randomized", "put_bottles_dustbin", 1),
]


@pytest.mark.parametrize(("task_config", "task", "seed"), CASES)
def test_accepted_seeds_equal_the_upstream_sequential_loop(task_config, task, seed):
    cfg = section(tasks=[task], seed=seed, episodes_per_task=25)
    cleared = _cache_clears()
    manifest = build(cfg, task_config, task)
    cleared_by_builder, cleared = _cache_clears() - cleared, _cache_clears()
    reference = upstream_sequential_loop(task, task_config, seed, 25)
    assert cleared_by_builder == _cache_clears() - cleared == 5  # close_env(clear_cache=...) cadence as upstream
    assert [ep["env_seed"] for ep in manifest["episodes"]] == reference["accepted"]
    assert [ep["seed"] for ep in manifest["episodes"]] == reference["accepted"]
    assert [ep["now_ep_num"] for ep in manifest["episodes"]] == list(range(25))
    skipped = [(s["seed"], s["reason"].split(":")[0]) for s in manifest["extra"]["skipped_seeds"]]
    assert skipped == reference["skipped"]
    assert manifest["extra"]["next_seed"] == reference["accepted"][-1] + 1
    assert manifest["episodes"][0]["env_seed"] >= 100000 * (1 + seed)


def test_every_skip_reason_occurs_and_is_recorded():
    reasons: Counter[str] = Counter()
    for task_config, task, seed in CASES:
        manifest = build(section(tasks=[task], seed=seed, episodes_per_task=25), task_config, task)
        reasons.update(manifest["extra"]["skipped_by_reason"])
        for item in manifest["extra"]["skipped_seeds"]:
            assert set(item) == {"seed", "now_ep_num", "reason"}
    assert {"unstable", "error", "plan_failed", "check_failed"} <= set(reasons)


def test_episode_entries_hold_expert_info_and_both_texts():
    manifest = build(section(episodes_per_task=5), "demo_randomized", "click_bell")
    for entry in manifest["episodes"]:
        assert set(entry["expert_info"]) == {"{A}", "{a}"}
        assert entry["instruction_seen"] and entry["instruction_unseen"]
        assert entry["instruction_seen"] != entry["instruction_unseen"]
        assert entry["instruction_choices"] == {"seen": 100, "unseen": 100}
        assert 0 <= entry["instruction_position"]["unseen"] < 100
        assert entry["clutter_xlim_default"] == [-0.59, 0.59]  # click_bell has no table bias: no drift
    drift = build(section(tasks=["dump_bin_bigbin"], episodes_per_task=5), "demo_randomized", "dump_bin_bigbin")
    xlims = [entry["clutter_xlim_default"][0] for entry in drift["episodes"]]
    assert xlims == sorted(xlims) and xlims[-1] > xlims[0] + 0.3  # upstream's drift, recorded


def test_builder_leaves_the_callers_rng_untouched():
    np.random.seed(1234)
    random.seed(99)
    np_state, py_state = np.random.get_state(), random.getstate()
    build(section(episodes_per_task=6), "demo_randomized", "click_bell", text_seed=None)
    after_np = np.random.get_state()
    assert same_numpy_state(np_state, after_np)
    assert random.getstate() == py_state
    assert np.random.rand() == np.random.RandomState(1234).rand()


def test_two_builds_from_scratch_give_byte_identical_manifests(tmp_path):
    """instruction_rng: seeded (the default): texts come from a private generator seeded from each episode's seed,
    so two builds with nothing cached, from different Python random states, write the same bytes."""
    cfg = section(tasks=["dump_bin_bigbin"], episodes_per_task=6)
    definition = ADAPTER.manifest_definition(cfg, "demo_randomized", "dump_bin_bigbin")
    assert definition["instruction_rng"] == "seeded"
    paths = []
    for lab, state in (("one", 1), ("two", 2)):
        random.seed(state)
        before = random.getstate()
        paths.append(tmp_path / lab / "m.json")
        seal_manifest(ADAPTER, definition, "demo_randomized", "dump_bin_bigbin", paths[-1], tmp_path / lab / "cache")
        assert random.getstate() == before  # the caller's random is neither read nor advanced
    assert paths[0].read_bytes() == paths[1].read_bytes()
    episodes = json.loads(paths[0].read_text())["episodes"]
    assert all(ep["instruction_seen"] and ep["instruction_unseen"] for ep in episodes)
    assert len({ep["instruction_rng_seed"] for ep in episodes}) == len(episodes)


def test_upstream_instruction_rng_draws_from_the_unseeded_module_random():
    """instruction_rng: upstream reproduces upstream's behaviour: the texts follow the global Python random."""
    cfg = section(episodes_per_task=8, instruction_rng="upstream")
    first, second = (build(cfg, "demo_clean", "click_bell", text_seed=s) for s in (1, 2))
    assert first["definition"]["instruction_rng"] == "upstream"
    assert "instruction_rng_seed" not in first["episodes"][0]
    texts = lambda m: [(e["instruction_seen"], e["instruction_unseen"]) for e in m["episodes"]]  # noqa: E731
    assert texts(first) != texts(second)
    assert texts(first) == texts(build(cfg, "demo_clean", "click_bell", text_seed=1))
    seeded = section(episodes_per_task=8)
    assert ADAPTER.manifest_definition(seeded, "demo_clean", "click_bell") != first["definition"]


def test_sealed_manifest_is_never_rewritten(tmp_path):
    cfg = section(episodes_per_task=10, instruction_rng="upstream")
    definition = ADAPTER.manifest_definition(cfg, "demo_clean", "click_bell")
    first = tmp_path / "queued" / "click_bell.json"
    cache = tmp_path / "cache"
    seal_manifest(ADAPTER, definition, "demo_clean", "click_bell", first, cache)
    sealed = first.read_bytes()
    (cached,) = (cache / "robotwin").glob("*.json")
    assert cached.read_bytes() == sealed

    # Cache wiped: with instruction_rng: upstream the builder would produce other texts (unseeded Python random,
    # as upstream; another process starts from another Python random state) ...
    cached.unlink()
    random.seed(20260101)
    rebuilt_path = tmp_path / "elsewhere" / "click_bell.json"
    seal_manifest(ADAPTER, definition, "demo_clean", "click_bell", rebuilt_path, None)
    rebuilt = json.loads(rebuilt_path.read_text())
    original = json.loads(sealed)
    assert [e["env_seed"] for e in rebuilt["episodes"]] == [e["env_seed"] for e in original["episodes"]]
    texts = lambda m: [e["instruction_unseen"] for e in m["episodes"]]  # noqa: E731
    assert texts(rebuilt) != texts(original)
    # ... but the manifest queued batches point to stays byte-identical, rebuilt cache or not.
    seal_manifest(ADAPTER, definition, "demo_clean", "click_bell", first, cache)
    assert first.read_bytes() == sealed
    # A lost output is restored from the cache, not rebuilt.
    first.unlink()
    seal_manifest(ADAPTER, definition, "demo_clean", "click_bell", first, cache)
    republished = first.read_bytes()
    first.unlink()
    seal_manifest(ADAPTER, definition, "demo_clean", "click_bell", first, cache)
    assert first.read_bytes() == republished
    # A manifest edited after sealing is refused.
    tampered = json.loads(republished)
    tampered["episodes"][0]["instruction_unseen"] = "do something else"
    first.write_text(json.dumps(tampered))
    with pytest.raises(ManifestError, match="modified after sealing"):
        load_manifest(first)


def test_batch_of_another_manifest_is_rejected(tmp_path):
    cfg = section(episodes_per_task=5)
    manifest = build(cfg, "demo_clean", "click_bell")
    other = build(section(episodes_per_task=5, instruction_list_length=50), "demo_clean", "click_bell")
    records = run_batches(cfg, "demo_clean-unseen", "click_bell", manifest, 5, tmp_path)
    result = build_batch_result(
        run="t", benchmark="robotwin", suite="demo_clean-unseen", task="click_bell", episodes=EpisodeRange(0, 5),
        manifest_hash=manifest["manifest_hash"], policy_identity="p@1", records=records,
        started_at="s", finished_at="f", duration_s=1.0,
    )  # fmt: skip
    path = tmp_path / "0000-5.json"
    write_batch_result(path, result)

    def expect(against):
        return BatchExpectation(
            "robotwin", "demo_clean-unseen", "click_bell", EpisodeRange(0, 5), against, "p@1", ADAPTER.record_setup_keys
        )

    validate_batch_result(path, expect(manifest))
    with pytest.raises(ResultValidationError, match=r"manifest_hash \w+ != current manifest"):
        validate_batch_result(path, expect(other))
    # Same hash, but an episode ran with another instruction text than the manifest's: rejected too.
    result["episodes"][2]["setup"]["instruction_unseen"] = "Click the bell"
    write_batch_result(path, result)
    with pytest.raises(ResultValidationError, match="episode 2: setup instruction_unseen"):
        validate_batch_result(path, expect(manifest))
    assert InProcessPolicy  # (policy used through run_batches)


class OutOfMemoryError(RuntimeError):
    """What torch raises (torch.cuda.OutOfMemoryError is a RuntimeError), without importing torch."""


def _missing_asset() -> OSError:
    """What opening an asset that is not there really raises (the expert check runs in the checkout's root)."""
    try:
        open("assets/objects/001_bell/base0.glb", "rb")  # noqa: SIM115
    except OSError as error:
        return error
    raise AssertionError("the stand-in checkout has no such asset")


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (
            OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nGPU 0 has a total capacity of 79 GiB"),
            "GPU error: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            RuntimeError("kernel launch failed\nCUDA error: an illegal memory access was encountered"),
            "GPU error: CUDA error: an illegal memory access was encountered",
        ),
        (MemoryError(), "out of host memory (MemoryError)"),
        (
            RuntimeError("vk::Device::allocateMemory: ErrorOutOfDeviceMemory"),
            "GPU error: RuntimeError: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        ),
        (None, "missing file 'assets/objects/001_bell/base0.glb' (FileNotFoundError: No such file or directory)"),
        (
            PermissionError(13, "Permission denied", "/dev/dri/renderD128"),
            "file or device error on '/dev/dri/renderD128' (PermissionError: Permission denied)",
        ),
        (ModuleNotFoundError("No module named 'curobo'", name="curobo"), "module curobo failed to import"),
    ],
    ids=["cuda-oom", "cuda-error-on-line-2", "host-oom", "vulkan", "missing-asset", "device-permission", "import"],
)
def test_a_failed_expert_check_fails_the_manifest_and_seals_nothing(tmp_path, monkeypatch, error, cause):
    """The check itself failing (here at the third seed) is not the expert rejecting the seed: the manifest job
    fails, the first line of its message naming the seed and the cause (the missing file, the GPU's own error line);
    neither the manifest nor its cache entry exists afterwards."""
    import importlib

    from robotwin_testlib import STANDIN_PATH

    from benchmarks.robotwin.checkout import RobotwinCheckout

    with RobotwinCheckout(STANDIN_PATH).activated():
        task_class = importlib.import_module("envs.click_bell").click_bell
    expert, calls = task_class.play_once, []
    cfg = section(episodes_per_task=5)
    failing_seed = 100002  # the third seed scanned from seed block 0

    def play_once(self):
        calls.append(1)
        if len(calls) == 3:
            raise error if error is not None else _missing_asset()
        return expert(self)

    monkeypatch.setattr(task_class, "play_once", play_once)
    definition = ADAPTER.manifest_definition(cfg, "demo_clean", "click_bell")
    output, cache = tmp_path / "manifests" / "click_bell.json", tmp_path / "cache"
    with pytest.raises(ManifestError) as info:
        seal_manifest(ADAPTER, definition, "demo_clean", "click_bell", output, cache)
    first, *rest = str(info.value).splitlines()
    assert first.startswith(f"RoboTwin manifest demo_clean/click_bell: seed {failing_seed}: the expert check itself ")
    assert cause in first
    assert "not a seed rejection" in rest[0]
    assert not output.exists() and not list(cache.rglob("*.json"))


def test_a_failed_expert_check_in_robotwins_interpreter_is_the_first_line_of_the_jobs_error(tmp_path):
    """The same through the job body and RoboTwin's own interpreter (Python 3.10): a copy of the stand-in checkout
    whose click_bell opens an asset that is not there at the third seed. The manifest job's error, not only its log,
    starts with the seed and the file."""
    import shutil

    from lightenv import py310_python
    from robotwin_testlib import STANDIN_PATH

    from evalwf.common.errors import SimulatorEnvError
    from evalwf.plan.campaign import Campaign
    from evalwf.plan.config import validate_config
    from evalwf.rules import jobs

    checkout = tmp_path / "robotwin"
    shutil.copytree(STANDIN_PATH, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    with (checkout / "envs" / "click_bell.py").open("a") as handle:
        handle.write(
            "\n\n_expert, _calls = click_bell.play_once, []\n\n\ndef _play_once(self):\n    _calls.append(1)\n"
            "    if len(_calls) == 3:\n        open('assets/objects/001_bell/base0.glb', 'rb')\n"
            "    return _expert(self)\n\n\nclick_bell.play_once = _play_once\n"
        )
    robotwin = {**raw_section(episodes_per_task=3), "robotwin_root": str(checkout), "python": str(py310_python())}
    robotwin.update(tasks=["click_bell"], task_configs=["demo_clean"], instruction_types=["unseen"])
    config = {"run": "t", "results_dir": str(tmp_path / "results"), "manifest_cache": str(tmp_path / "cache"),
              "policy": {"name": "p", "command": "x --port {port}"}, "benchmarks": {"robotwin": robotwin}}  # fmt: skip
    campaign = Campaign(validate_config(config))
    [output] = campaign.manifests()
    with pytest.raises(SimulatorEnvError) as info:
        jobs.seal_task_manifest(campaign, *campaign.manifests()[output].manifest_key, output)
    first = str(info.value).splitlines()[0]
    assert f"failed in {py310_python()}: ManifestError: RoboTwin manifest demo_clean/click_bell: seed 100002: " in first
    assert "missing file 'assets/objects/001_bell/base0.glb' (FileNotFoundError: No such file or directory)" in first
    assert not Path(output).exists() and not list((tmp_path / "cache").rglob("*.json"))
