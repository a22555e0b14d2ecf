"""LIBERO adapter logic without the simulator: config expansion, manifests, schema, observation conversion,
init-state reading, RNG-state records, and the batch evaluator's retry and determinism on a fake env."""

from __future__ import annotations

import copy
import hashlib
import math
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import numpy as np
import pytest
import yaml

from benchmarks.libero import env as libero_env
from benchmarks.libero import init_states as init_states_module
from benchmarks.libero.adapter import LiberoAdapter
from benchmarks.libero.init_states import load_init_states
from benchmarks.libero.observation import openpi_observation, quat_to_axis_angle, resize_with_pad, rotate_180
from benchmarks.libero.rng_states import decode_state, encode_state
from benchmarks.libero.settings import LiberoSettings
from benchmarks.libero.suites import SUITES
from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter
from evalwf.benchmark.batches import EpisodeRange
from evalwf.common.errors import ConfigError
from evalwf.plan.config import validate_section

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "benchmarks" / "libero" / "schema.yaml"


def raw_section(**overrides: Any) -> dict[str, Any]:
    base = {"episodes_per_task": 3, "batch_size": 1, "seed": 7, "suites": {"libero_spatial": [0]}}
    base.update(overrides)
    return base


ADAPTER = get_adapter("libero")


def cfg(**overrides: Any) -> LiberoSettings:
    """LIBERO's settings as a campaign has them: from a validated section, the schema's defaults filled in."""
    return benchmark_settings("libero", validate_section("libero", raw_section(**overrides)))


# --- expand / manifest_definition ---------------------------------------------------------------------------


def test_registered_under_its_name():
    assert isinstance(get_adapter("libero"), LiberoAdapter)
    assert ADAPTER.record_setup_keys == ("init_state_index",)


def test_expand_all_suites():
    refs = ADAPTER.expand(cfg(suites={name: "all" for name in SUITES}))
    assert len(refs) == 130
    assert refs[0] == TaskRef("libero", "libero_spatial", "0")
    assert [r.task for r in refs if r.suite == "libero_90"] == [str(i) for i in range(90)]
    assert {r.suite for r in refs} == set(SUITES)


def test_expand_task_list_keeps_order():
    refs = ADAPTER.expand(cfg(suites={"libero_goal": [3, 1], "libero_10": [9]}))
    assert refs == [
        TaskRef("libero", "libero_goal", "3"),
        TaskRef("libero", "libero_goal", "1"),
        TaskRef("libero", "libero_10", "9"),
    ]


@pytest.mark.parametrize(
    ("suites", "where", "message"),
    [
        ({"libero_100": "all"}, "suites", "libero_100"),  # the schema's enums and types, not the adapter
        ({"libero_spatial": [10]}, "suites.libero_spatial", "unknown task id(s) 10"),  # the adapter: per suite
        ({"libero_90": [90]}, "suites.libero_90", "90 is greater than the maximum of 89"),
        ({"libero_object": [-1]}, "suites.libero_object", ""),
        ({"libero_goal": ["3"]}, "suites.libero_goal", ""),
        ({"libero_goal": [True]}, "suites.libero_goal", ""),
        ({"libero_goal": [1, 1]}, "suites.libero_goal", ""),
        ({"libero_goal": []}, "suites.libero_goal", ""),
    ],
)
def test_expand_rejects_unknown_names(suites, where, message):
    with pytest.raises(ConfigError) as info:
        cfg(suites=suites)
    assert f"config key 'benchmarks.libero.{where}" in str(info.value)
    assert message in str(info.value)


def test_expand_rejects_more_trials_than_init_states():
    with pytest.raises(ConfigError, match="episodes_per_task"):
        ADAPTER.expand(cfg(episodes_per_task=51))


def test_manifest_definition():
    definition = ADAPTER.manifest_definition(cfg(episodes_per_task=50, seed=11), "libero_object", "4")
    assert definition == {
        "benchmark": "libero",
        "suite": "libero_object",
        "task_id": 4,
        "num_trials": 50,
        "base_seed": 11,
        "libero_version": "hf-libero==0.1.4",
        "protocol": "openpi-sequential-v1",
    }


def test_adapter_import_does_not_import_the_simulator():
    code = (
        "import sys, benchmarks.libero.adapter, benchmarks.libero.suites;"
        "print(sorted(m for m in ('libero', 'robosuite', 'mujoco', 'cv2', 'PIL') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- schema -------------------------------------------------------------------------------------------------


def _validate(section: dict[str, Any]) -> dict[str, Any]:
    """LIBERO's schema.yaml as the config schema composes it (its shared definitions, `batch_size`'s number-or-auto
    among them, live in evalwf/plan/config.schema.yaml's $defs)."""
    from evalwf.plan.config import config_schema

    schema = yaml.safe_load(SCHEMA.read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    composed = {**schema, "$defs": {**config_schema()["$defs"], **schema.get("$defs", {})}}
    validator_class(composed).validate(section)
    return section


def test_schema_accepts_a_section_and_documents_defaults():
    _validate(raw_section(suites={"libero_spatial": "all", "libero_90": [0, 89]}, max_steps=None, record_video="all"))
    schema = yaml.safe_load(SCHEMA.read_text())
    defaults = {k: v.get("default") for k, v in schema["properties"].items() if "default" in v}
    assert defaults == {
        "seed": 7,
        "max_steps": None,
        "replan_steps": 5,
        "num_wait_steps": 10,
        "camera_size": 256,
        "resize_size": 224,
        "record_video": "none",
    }


@pytest.mark.parametrize(
    "section",
    [
        raw_section(suites={"libero_spatial": "some"}),
        raw_section(suites={"libero_spatial": ["0"]}),
        raw_section(suites={"libero_100": "all"}),
        raw_section(suites={}),
        raw_section(episodes_per_task=0),
        raw_section(episodes_per_task=51),
        raw_section(batch_size=0),
        raw_section(max_steps=0),
        raw_section(replan_steps=0),
        raw_section(record_video="yes"),
        raw_section(save_video=True),
        raw_section(unknown_key=1),
        {"episodes_per_task": 1, "batch_size": 1},
    ],
)
def test_schema_rejects(section):
    with pytest.raises(jsonschema.ValidationError):
        _validate(section)


def test_main_config_loader_composes_the_libero_schema():
    from evalwf.plan.config import validate_config

    raw = {
        "run": "t",
        "policy": {"name": "standin", "command": "python -m benchmarks.standin.policy_server --port {port}"},
        "benchmarks": {"libero": {"episodes_per_task": 2, "batch_size": 1, "suites": {"libero_goal": [0]}}},
    }
    section = validate_config(raw).section_settings("libero")
    assert section["seed"] == 7  # openpi's seed is LIBERO's default
    assert (section["replan_steps"], section["num_wait_steps"], section["max_steps"]) == (5, 10, None)
    bad = copy.deepcopy(raw)
    bad["benchmarks"]["libero"]["suites"] = {"libero_goal": [10]}
    with pytest.raises(ConfigError, match="libero_goal"):
        validate_config(bad)


# --- observation conversion ----------------------------------------------------------------------------------


def test_rotate_180():
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    rotated = rotate_180(image)
    assert rotated.flags.c_contiguous
    assert (rotated[0, 0] == image[1, 2]).all() and (rotated[1, 2] == image[0, 0]).all()


def test_resize_with_pad_square_and_passthrough():
    image = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    out = resize_with_pad(image, 224, 224)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    from PIL import Image

    expected = np.asarray(Image.fromarray(image).resize((224, 224), resample=Image.BILINEAR))
    assert (out == expected).all()
    assert resize_with_pad(out, 224, 224) is out


def test_resize_with_pad_keeps_aspect_ratio_and_centres():
    image = np.full((100, 200, 3), 255, dtype=np.uint8)  # wide: scaled to 224 x 112, padded top and bottom
    out = resize_with_pad(image, 224, 224)
    rows = np.flatnonzero(out[:, :, 0].max(axis=1))
    assert (rows[0], rows[-1]) == (56, 56 + 112 - 1)
    assert out[:56].max() == 0 and out[56 + 112 :].max() == 0


@pytest.mark.parametrize("shape", [(256, 256, 3), (100, 200, 3), (300, 120, 3), (224, 224, 3), (7, 5, 3)])
def test_resize_with_pad_matches_openpi_client(shape):
    """Against openpi's own client function (openpi-client is installed beside the workflow for tests)."""
    image_tools = pytest.importorskip("openpi_client.image_tools")
    image = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    expected = image_tools.convert_to_uint8(image_tools.resize_with_pad(image, 224, 224))
    assert (resize_with_pad(image, 224, 224) == expected).all()


def test_quat_to_axis_angle():
    assert (quat_to_axis_angle(np.array([0.0, 0.0, 0.0, 1.0])) == 0).all()
    angle = 0.7
    quat = np.array([0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2)])
    assert np.allclose(quat_to_axis_angle(quat), [0.0, 0.0, angle])
    assert np.allclose(quat_to_axis_angle(np.array([1.0, 0.0, 0.0, 0.0])), [math.pi, 0.0, 0.0])
    assert np.isfinite(quat_to_axis_angle(np.array([0.0, 0.0, 0.0, 1.0 + 1e-12]))).all()  # clipped


def test_openpi_observation():
    rng = np.random.default_rng(1)
    obs = {
        "agentview_image": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
        "robot0_eye_in_hand_image": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
        "robot0_eef_pos": np.array([0.1, 0.2, 0.3]),
        "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
        "robot0_gripper_qpos": np.array([0.04, -0.04]),
    }
    out = openpi_observation(obs, "put the bowl on the plate", 224)
    assert set(out) == {"observation/image", "observation/wrist_image", "observation/state", "prompt"}
    assert out["observation/image"].shape == (224, 224, 3) and out["observation/image"].dtype == np.uint8
    assert (out["observation/image"] == resize_with_pad(rotate_180(obs["agentview_image"]), 224, 224)).all()
    assert out["observation/state"].tolist() == [0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 0.04, -0.04]
    assert out["prompt"] == "put the bowl on the plate"


# --- init states and RNG records ----------------------------------------------------------------------------


def _torch_style_zip(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/version", "3\n")
    return path


def test_load_init_states_reads_torch_zip_of_numpy(tmp_path):
    states = np.random.default_rng(2).normal(size=(50, 9))
    path = _torch_style_zip(tmp_path / "t.pruned_init", pickle.dumps(states, protocol=2))
    loaded = load_init_states(path)
    assert loaded.dtype == np.float64 and (loaded == states).all()


def test_load_init_states_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = _torch_style_zip(tmp_path / "evil.pruned_init", pickle.dumps(Evil()))
    with pytest.raises(pickle.UnpicklingError, match="only numpy arrays"):
        load_init_states(path)


def test_rng_state_round_trip_and_integrity():
    rng = np.random.RandomState(7)
    rng.normal()  # leaves a cached gaussian in the state
    encoded = encode_state(rng.get_state())
    restored = np.random.RandomState()
    restored.set_state(decode_state(encoded))
    assert restored.uniform() == rng.uniform() and restored.normal() == rng.normal()
    assert len(encoded["keys_b64"]) == 3328  # 624 uint32
    tampered = dict(encoded, pos=encoded["pos"] + 1)
    with pytest.raises(ValueError, match="sha256"):
        decode_state(tampered)


# --- the batch evaluator on a fake env ----------------------------------------------------------------------


class FakeEnv:
    """Behaves like LIBERO where it matters: reset re-places a 'cabinet' from numpy's global RNG, the first
    frame shows it, done after `solve_at` steps. Faults: raise on the listed global step numbers."""

    instances: list[FakeEnv] = []
    step_faults: set[int] = set()
    steps_total = 0

    def __init__(self, consume_rng_in: str | None = None):
        self.closed = False
        self.consume = consume_rng_in  # None, "step" or "set_init_state": where it draws from the global RNG
        FakeEnv.instances.append(self)

    def seed(self, seed: int) -> None:
        np.random.seed(seed)

    def reset(self) -> None:
        self.cabinet = np.random.uniform(-1, 1, 3)
        self.t = 0

    def _obs(self) -> dict[str, Any]:
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[0, 0] = ((self.cabinet + 1) * 100).astype(np.uint8)
        frame[1, 1] = self.state[:3].astype(np.uint8)
        return {
            "agentview_image": frame,
            "robot0_eye_in_hand_image": frame.copy(),
            "robot0_eef_pos": self.state[:3] / 10,
            "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
            "robot0_gripper_qpos": np.array([0.0, 0.0]),
        }

    def set_init_state(self, state: np.ndarray) -> dict[str, Any]:
        if self.consume == "set_init_state":
            np.random.uniform()
        self.state = np.array(state, dtype=float)
        return self._obs()

    def step(self, action: list[float]) -> tuple[dict[str, Any], float, bool, dict]:
        FakeEnv.steps_total += 1
        if FakeEnv.steps_total in FakeEnv.step_faults:
            raise RuntimeError("MuJoCo: simulation unstable")
        if self.consume == "step":
            np.random.uniform()
        self.t += 1
        self.state[:3] += np.asarray(action[:3])
        done = self.state[3] > 0 and self.t >= 10 + int(self.state[3])
        return self._obs(), float(done), bool(done), {}

    def close(self) -> None:
        self.closed = True


class HashPolicy:
    """Deterministic: actions derived from a hash of the observation."""

    def __init__(self, horizon: int = 8):
        self.horizon, self.calls = horizon, 0

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        digest = hashlib.sha256(obs["observation/image"].tobytes() + obs["observation/state"].tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
        return {"actions": rng.uniform(-1, 1, (self.horizon, 7)).astype(np.float32)}


@pytest.fixture
def fake_libero(monkeypatch, tmp_path):
    bddl = tmp_path / "task.bddl"
    bddl.write_text("(define (problem fake))")
    # init state j: [x, y, z, solve_after]: trial 1 succeeds after 3 steps, the others never
    states = np.array([[j, 2 * j, 3 * j, 3 if j == 1 else 0] for j in range(50)], dtype=float)
    FakeEnv.instances, FakeEnv.step_faults, FakeEnv.steps_total = [], set(), 0
    options = {"consume": None}
    monkeypatch.setattr(
        libero_env,
        "task_spec",
        lambda suite, task_id: SimpleNamespace(
            suite=suite,
            task_id=task_id,
            name="fake",
            language="do the thing",
            bddl_file=bddl,
            init_states_file=tmp_path / "x.pruned_init",
        ),
    )
    monkeypatch.setattr(libero_env, "make_env", lambda spec, camera_size=256: FakeEnv(options["consume"]))
    monkeypatch.setattr(libero_env, "package_versions", lambda: {"fake": "1"})
    monkeypatch.setattr(init_states_module, "load_init_states", lambda path: states)
    monkeypatch.setenv("LIBERO_RNG_CACHE_DIR", str(tmp_path / "cache"))
    return options


def _manifest(bench: LiberoSettings) -> dict[str, Any]:
    definition = ADAPTER.manifest_definition(bench, "libero_spatial", "0")
    return {"definition": definition, "episodes": ADAPTER.build_manifest(definition, log=lambda _m: None).episodes}


def _run(bench, manifest, start, count, policy=None, log=None):
    ctx = BatchContext(
        TaskRef("libero", "libero_spatial", "0"),
        EpisodeRange(start, count),
        manifest,
        bench,
        policy or HashPolicy(),
        Path("/nonexistent"),
        log or (lambda _m: None),
    )
    return list(ADAPTER.evaluate_batch(ctx))


def _without_duration(records):
    return [{k: v for k, v in r.items() if k not in ("duration_s", "reset_s")} for r in records]  # the timings


def test_fake_batches_of_one_equal_one_batch_and_sequential_loop(fake_libero):
    bench = cfg(episodes_per_task=4, max_steps=12)
    np.random.seed(12345)
    caller_state = np.random.get_state()
    manifest = _manifest(bench)
    together = _run(bench, manifest, 0, 4)
    singles = [r for j in range(4) for r in _run(bench, manifest, j, 1)]
    assert _without_duration(together) == _without_duration(singles)
    assert all(env.closed for env in FakeEnv.instances) and len(FakeEnv.instances) == 1 + 1 + 4
    # the caller's global RNG was neither consumed nor changed
    assert all(
        (a == b).all() if isinstance(a, np.ndarray) else a == b
        for a, b in zip(np.random.get_state(), caller_state, strict=True)
    )
    # the cabinet each trial shows is the one the plain sequential loop (seeded once) shows
    env = FakeEnv()
    env.seed(7)
    expected = []
    for j in range(4):
        env.reset()
        frame = env.set_init_state([j, 2 * j, 3 * j, 0])["agentview_image"]
        expected.append(hashlib.sha256(np.ascontiguousarray(frame).tobytes()).hexdigest())
    # (frames differ in the init-state pixel only through the state, which the fake copies unchanged)
    assert [r["extra"]["first_frame_sha256"] for r in together] == expected
    assert [r["success"] for r in together] == [False, True, False, False]
    assert together[1]["steps"] == 3 and together[0]["steps"] == 12
    assert together[0]["extra"]["max_steps"] == 12 and together[0]["extra"]["max_steps_override"] is True
    assert together[0]["setup"] == {"init_state_index": 0} and together[0]["seed"] == 7
    assert not any(r["extra"]["rollout_consumed_global_rng"] for r in together)


def test_fake_default_max_steps_and_replanning(fake_libero):
    bench = cfg(episodes_per_task=1)
    policy = HashPolicy(horizon=8)
    [record] = _run(bench, _manifest(bench), 0, 1, policy)
    assert record["steps"] == 220 and record["extra"]["max_steps"] == 220
    assert record["extra"]["max_steps_override"] is False
    assert policy.calls == 220 // 5  # replan every 5 actions


def test_fake_short_action_chunk_is_an_error(fake_libero):
    bench = cfg(episodes_per_task=1)
    with pytest.raises(ValueError, match=r"libero_spatial task 0 trial 0: policy returned actions of shape \(4, 7\)"):
        _run(bench, _manifest(bench), 0, 1, HashPolicy(horizon=4))


def test_fake_simulator_error_is_retried_once_on_a_fresh_env(fake_libero):
    bench = cfg(episodes_per_task=2, max_steps=5)
    manifest = _manifest(bench)
    reference = _run(bench, manifest, 0, 2)
    FakeEnv.instances, FakeEnv.steps_total = [], 0
    FakeEnv.step_faults = {15 + 3}  # trial 1's 3rd wait step
    messages = []
    retried = _run(bench, manifest, 0, 2, log=messages.append)
    assert _without_duration(retried)[0] == _without_duration(reference)[0]
    assert retried[1]["extra"].pop("retried_after_simulator_error").startswith("env.step: RuntimeError")
    assert _without_duration(retried)[1] == _without_duration(reference)[1]
    assert len(FakeEnv.instances) == 2 and all(env.closed for env in FakeEnv.instances)
    assert any("retrying on a fresh env" in m for m in messages)


def test_fake_simulator_error_twice_fails_the_batch_naming_the_trial(fake_libero):
    bench = cfg(episodes_per_task=2, max_steps=5)
    manifest = _manifest(bench)
    FakeEnv.step_faults = {15 + 3, 15 + 3 + 3}
    with pytest.raises(RuntimeError, match="LIBERO libero_spatial task 0 trial 1: simulator failed twice"):
        _run(bench, manifest, 0, 2)
    assert all(env.closed for env in FakeEnv.instances)


def test_fake_policy_error_is_not_retried(fake_libero):
    class Broken:
        def infer(self, obs):
            raise ConnectionError("policy server gone")

    bench = cfg(episodes_per_task=1)
    with pytest.raises(ConnectionError):
        _run(bench, _manifest(bench), 0, 1, Broken())
    assert len(FakeEnv.instances) == 2  # manifest + batch: no retry env


@pytest.mark.parametrize("where", ["step", "set_init_state"])
def test_fake_rollout_consuming_the_global_rng_is_flagged(fake_libero, where):
    fake_libero["consume"] = where
    bench = cfg(episodes_per_task=1, max_steps=5)
    messages = []
    [record] = _run(bench, _manifest(bench), 0, 1, log=messages.append)
    assert record["extra"]["rollout_consumed_global_rng"] is True
    assert any("consumed numpy's global RNG" in m for m in messages)


def test_fake_manifest_is_cached_and_preserves_the_caller_rng(fake_libero):
    bench = cfg(episodes_per_task=3)
    np.random.seed(99)
    before = np.random.get_state()[1].copy()
    first = _manifest(bench)
    assert (np.random.get_state()[1] == before).all()
    built = len(FakeEnv.instances)
    again = _manifest(bench)
    assert len(FakeEnv.instances) == built  # served from the cache
    assert first == again
    states = [e["np_rng_state"] for e in first["episodes"]]
    assert [e["init_state_index"] for e in first["episodes"]] == [0, 1, 2]
    # trial 0 starts right after env.seed(7); each later one after one more reset
    assert decode_state(states[0])[1].tolist() == np.random.RandomState(7).get_state()[1].tolist()
    assert len({s["sha256"] for s in states}) == 3


def test_fake_manifest_for_another_task_is_refused(fake_libero):
    bench = cfg(episodes_per_task=1)
    manifest = _manifest(bench)
    ctx = BatchContext(
        TaskRef("libero", "libero_spatial", "1"),
        EpisodeRange(0, 1),
        manifest,
        bench,
        HashPolicy(),
        Path("/nonexistent"),
        lambda _m: None,
    )
    from evalwf.common.errors import ManifestError

    with pytest.raises(ManifestError, match="not libero_spatial task 1"):
        list(ADAPTER.evaluate_batch(ctx))
