"""The LIBERO simulator, imported lazily: runtime environment, task table, env creation, a smoke test.

Everything LIBERO needs at run time is set here, before its first import, so callers need no exports:
MUJOCO_GL=egl and PYOPENGL_PLATFORM=egl (headless rendering, on llvmpipe without a GPU) and LIBERO_CONFIG_PATH
(<venv>/libero-config, written by scripts/setup_libero.sh; without it LIBERO's first import prompts on stdin).
Values already in the environment win. Nothing here downloads anything: hf-libero would fetch missing scene
assets from a model hub, so a missing asset link is reported as an install problem instead.

The task table is read from hf-libero's own libero_suite_task_map.py by path, not through
libero.libero.benchmark, which imports torch at module level (only to read the init-state files, which
init_states.py reads without it).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import re
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SETUP_HINT = "install it with scripts/setup_libero.sh (make libero-env)"
ENV_RESOLUTION = 256  # openpi's LIBERO_ENV_RESOLUTION: the cameras the training data was rendered with


class LiberoUnavailable(RuntimeError):
    """The LIBERO simulator environment is not installed (or not configured) in this interpreter."""


def config_dir() -> Path:
    return Path(os.environ.get("LIBERO_CONFIG_PATH") or Path(sys.prefix) / "libero-config")


def configure_runtime() -> None:
    """Set the environment LIBERO needs (defaults only) and check its config file exists."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    os.environ.setdefault("LIBERO_CONFIG_PATH", str(config_dir()))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: never reach for a model hub
    _drop_gpu_label_without_driver()
    if not (config_dir() / "config.yaml").is_file():
        raise LiberoUnavailable(f"LIBERO config {config_dir() / 'config.yaml'} is missing; {SETUP_HINT}")


def _drop_gpu_label_without_driver() -> None:
    """robosuite renders on the EGL device numbered by CUDA_VISIBLE_DEVICES. Without an NVIDIA driver (CPU
    rendering on llvmpipe, where a worker's GPU id is only a label) there is a single EGL device and any other
    number fails, so the label moves to EVAL_GPU_LABEL (still recorded in results). With a driver, robosuite's
    own choice stands."""
    label = os.environ.get("CUDA_VISIBLE_DEVICES")
    if label and not os.path.exists("/proc/driver/nvidia") and "MUJOCO_EGL_DEVICE_ID" not in os.environ:
        os.environ.setdefault("EVAL_GPU_LABEL", label)
        del os.environ["CUDA_VISIBLE_DEVICES"]


def unavailable_reason() -> str | None:
    """Why the simulator cannot run here, or None when it can (cheap: imports nothing heavy)."""
    for module in ("libero", "robosuite", "mujoco"):
        if importlib.util.find_spec(module) is None:
            return f"python package {module!r} is not installed in {sys.prefix}; {SETUP_HINT}"
    if not (config_dir() / "config.yaml").is_file():
        return f"LIBERO config {config_dir() / 'config.yaml'} is missing; {SETUP_HINT}"
    return None


@cache
def _libero_paths() -> dict[str, Path]:
    configure_runtime()
    from libero.libero import get_libero_path  # reads config.yaml; no prompt once it exists

    paths = {key: Path(get_libero_path(key)) for key in ("bddl_files", "init_states", "assets")}
    if not (paths["assets"] / "scenes").is_dir():
        raise LiberoUnavailable(f"LIBERO scene assets not found at {paths['assets']}; {SETUP_HINT}")
    return paths


@cache
def _task_map() -> dict[str, list[str]]:
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise LiberoUnavailable(f"hf-libero is not installed in {sys.prefix}; {SETUP_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "libero" / "benchmark" / "libero_suite_task_map.py"
    module_spec = importlib.util.spec_from_file_location("_libero_suite_task_map", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return {suite: list(names) for suite, names in module.libero_task_map.items()}


def task_language(name: str) -> str:
    """The instruction LIBERO derives from a task name: libero_10/90 names start with an upper-case scene
    prefix ('KITCHEN_SCENE3_turn_on_the_stove') that is dropped; underscores become spaces."""
    if name[:1].isupper():
        match = re.search(r"SCENE\d+_", name)
        if match:
            name = name[match.end() :]
    return name.replace("_", " ")


@dataclass(frozen=True)
class TaskSpec:
    suite: str
    task_id: int
    name: str
    language: str
    bddl_file: Path
    init_states_file: Path


def task_spec(suite: str, task_id: int) -> TaskSpec:
    """Task `task_id` of a suite in LIBERO's default task order (task_order_index 0), as openpi uses it."""
    names = _task_map()[suite]
    if not 0 <= task_id < len(names):
        raise ValueError(f"LIBERO suite {suite} has tasks 0..{len(names) - 1}, not {task_id}")
    name = names[task_id]
    paths = _libero_paths()
    return TaskSpec(
        suite=suite,
        task_id=task_id,
        name=name,
        language=task_language(name),
        bddl_file=paths["bddl_files"] / suite / f"{name}.bddl",
        init_states_file=paths["init_states"] / suite / f"{name}.pruned_init",
    )


def make_env(spec: TaskSpec, camera_size: int) -> Any:
    """A LIBERO OffScreenRenderEnv for one task (agentview + wrist cameras, camera_size square). Close it."""
    configure_runtime()
    _libero_paths()
    from libero.libero.envs import OffScreenRenderEnv

    return OffScreenRenderEnv(bddl_file_name=str(spec.bddl_file), camera_heights=camera_size, camera_widths=camera_size)


def close_env(env: Any) -> None:
    """Close explicitly (a robosuite EGL env left to __del__ at exit prints a traceback)."""
    if env is not None:
        env.close()


def package_versions() -> dict[str, str | None]:
    """The installed versions of what shapes LIBERO's episodes (None: not installed)."""
    from benchmarks.libero.suites import EPISODE_PACKAGES
    from evalwf.common.package_versions import installed_versions

    return installed_versions(list(EPISODE_PACKAGES))


_PROBE_SCENE = """<mujoco><worldbody><light pos="0 0 2"/><camera name="probe" pos="0 -1 0.5" xyaxes="1 0 0 0 0.45 0.9"/>
<geom type="box" size="0.1 0.1 0.1" rgba="0.8 0.2 0.2 1"/></worldbody></mujoco>"""


def assets_found() -> str:
    """Where LIBERO's BDDL files, init states and scene assets are (raises LiberoUnavailable naming what is missing)."""
    return str(_libero_paths()["assets"])


def render_one_frame() -> str:
    """One frame through robosuite's own offscreen context (EGL on the device CUDA_VISIBLE_DEVICES selects, as every
    LIBERO camera renders), of a one-box scene: fails as LIBERO's first camera would on a node without EGL."""
    configure_runtime()
    from robosuite.utils.binding_utils import MjRenderContextOffscreen, MjSim

    sim = MjSim.from_xml_string(_PROBE_SCENE)
    MjRenderContextOffscreen(sim, device_id=-1)
    image = sim.render(width=64, height=48, camera_name="probe")
    if image.shape != (48, 64, 3) or image.max() == 0:
        raise RuntimeError(f"robosuite rendered an unexpected {image.shape} image (max {image.max()})")
    return f"one 64x48 frame rendered (MUJOCO_GL={os.environ.get('MUJOCO_GL')})"


def gl_renderer() -> str:
    """What renders LIBERO's cameras here, as OpenGL names it (GL_RENDERER, GL_VERSION) in a context robosuite makes
    as for every LIBERO camera (EGL on the device CUDA_VISIBLE_DEVICES selects; llvmpipe without a GPU): about a
    second once robosuite is imported (docs/libero.md)."""
    configure_runtime()
    from OpenGL import GL
    from robosuite.utils.binding_utils import MjRenderContextOffscreen, MjSim

    context = MjRenderContextOffscreen(MjSim.from_xml_string(_PROBE_SCENE), device_id=-1)
    context.gl_ctx.make_current()
    renderer, version = (GL.glGetString(name) for name in (GL.GL_RENDERER, GL.GL_VERSION))
    del context
    gc.collect()  # the context and its sim refer to each other: freed now, not at exit after EGL is gone (a traceback)
    if not renderer:
        raise RuntimeError("OpenGL named no renderer (GL_RENDERER empty)")
    name, version_text = renderer.decode(errors="replace"), (version or b"?").decode(errors="replace")
    return f"{name} (OpenGL {version_text}, MUJOCO_GL={os.environ.get('MUJOCO_GL')})"


def smoke() -> None:
    """Create, reset, restore init state 0 and step one real env (libero_spatial task 0, 128 px cameras: a smoke
    test, not a campaign setting); print timings."""
    from benchmarks.libero.init_states import load_init_states
    from benchmarks.libero.suites import DUMMY_ACTION

    reason = unavailable_reason()
    if reason:
        raise LiberoUnavailable(reason)
    started = time.monotonic()
    spec = task_spec("libero_spatial", 0)
    init_states = load_init_states(spec.init_states_file)
    size = 128
    env = make_env(spec, size)
    created = time.monotonic()
    try:
        env.seed(7)
        env.reset()
        obs = env.set_init_state(init_states[0])
        reset = time.monotonic()
        obs, _reward, _done, _info = env.step(list(DUMMY_ACTION))
        stepped = time.monotonic()
    finally:
        close_env(env)
    image = obs["agentview_image"]
    if image.shape != (size, size, 3) or image.max() == 0:
        raise RuntimeError(f"LIBERO rendered an unexpected agentview image {image.shape}, max {image.max()}")
    print(
        f"LIBERO smoke test OK ({', '.join(f'{k} {v}' for k, v in package_versions().items())}): "
        f"task '{spec.language}', {len(init_states)} init states; env created in {created - started:.1f}s, "
        f"reset + init state {reset - created:.1f}s, one step {stepped - reset:.2f}s "
        f"(MUJOCO_GL={os.environ.get('MUJOCO_GL')})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="LIBERO simulator environment checks")
    parser.add_argument("--smoke", action="store_true", help="run one real env for one step")
    args = parser.parse_args(argv)
    if args.smoke:
        smoke()
    else:
        reason = unavailable_reason()
        print(reason or f"LIBERO available in {sys.prefix}")
        sys.exit(1 if reason else 0)


if __name__ == "__main__":
    main()
