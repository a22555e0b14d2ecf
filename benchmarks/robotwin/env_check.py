"""What a node needs to run RoboTwin jobs, checked in RoboTwin's own interpreter: the checkout and its assets, the
Python packages upstream's installer builds (SAPIEN, mplib, cuRobo, pytorch3d, torch) with upstream's patches, a task
module imported from the checkout, CUDA as the worker sets CUDA_VISIBLE_DEVICES, and one frame rendered by SAPIEN the
way upstream's Base_Task.setup_scene configures it (Vulkan, ray-tracing shader, OIDN denoiser).

The adapter's node_checks (what `evalwf doctor` and the workers run) and scripts/setup_robotwin.sh's proof before it
writes its "installed" stamp are this module:

    python -m benchmarks.robotwin.env_check --root CHECKOUT [--task-configs demo_clean demo_randomized] [--only ...]

prints one line per check with its fix; exit status 0 when every check passed, 1 otherwise.

The stand-in checkout (benchmarks/robotwin/standin_checkout, a file named STANDIN at its root) has no simulator:
for it only the checkout and the task module are checked. Runs on Python 3.10 (light core only at import).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.robotwin.checkout import RobotwinCheckout, resolve_root
from benchmarks.robotwin.protocols import DEFAULT, PROTOCOLS, Protocol, protocol
from benchmarks.robotwin.settings import RobotwinSettings
from evalwf.benchmark.node_checks import CheckFailed, NodeCheck, run_checks
from evalwf.common.errors import ConfigError

SETUP = "rerun scripts/setup_robotwin.sh on this node (docs/robotwin.md, 'Setting up and checking a node')"
PACKAGES_FIX = (
    "rerun scripts/setup_robotwin.sh on this node: it runs upstream's installer (cuRobo and pytorch3d build from "
    "source: nvcc and CUDA_HOME)"
)
STANDIN_MARKER = "STANDIN"
PACKAGES = ("sapien", "mplib", "curobo", "pytorch3d", "torch")
PROBE_TASK = "click_bell"  # any task module: importing it imports upstream's envs package and its dependencies
ASSETS = {  # folder under assets/ -> the task configs needing it (None: all)
    "embodiments": None,
    "objects": None,
    "background_texture": ("demo_randomized",),  # domain randomisation's table and wall textures
}
# upstream's script/_install.sh edits these files of the installed packages (sed): the expert planner depends on them
PATCHES = (
    ("sapien", "wrapper/urdf_loader.py", 'open(urdf_file, "r") as f', "reads URDF files without encoding='utf-8'"),
    ("mplib", "planner.py", "< 1e-4 or collide or not within_joint_limit", "screw plans still fail on collisions"),
)
CUDA_FIX = "install torch built for this node's CUDA (TORCH_INDEX of scripts/setup_robotwin.sh); check the driver"
VULKAN_FIX = (
    "SAPIEN renders through Vulkan: install the NVIDIA driver's Vulkan ICD (e.g. the libnvidia-gl package matching "
    "the driver; /usr/share/vulkan/icd.d/nvidia_icd.json) and check that `vulkaninfo --summary` lists this GPU; "
    "VK_ICD_FILENAMES, when set, must name that ICD file"
)


def checks(root_setting: str | None, task_configs: list[str], protocol_name: str | None = None) -> list[NodeCheck]:
    """RoboTwin's checks for a checkout as configured (`robotwin_root`, `protocol`) and the task configs a campaign
    runs."""
    root = resolve_root(root_setting)
    line = protocol(protocol_name)
    standin = root is not None and (root / STANDIN_MARKER).is_file()
    found: list[NodeCheck] = [NodeCheck("checkout", lambda: _checkout(root, line), SETUP)]
    if not standin:
        found += [
            NodeCheck(
                "assets", lambda: _assets(root, task_configs, line), _assets_fix(root, line), needs=("checkout",)
            ),
            NodeCheck("packages", _packages, PACKAGES_FIX),
            NodeCheck("patches", _patches, SETUP, needs=("packages",)),
        ]
    task_needs = ("checkout",) if standin else ("checkout", "packages")
    found.append(NodeCheck("task module", lambda: _task_module(root, line), SETUP, needs=task_needs))
    if not standin:
        found += [
            NodeCheck("cuda", _cuda, CUDA_FIX, needs=("packages",)),
            NodeCheck("renderer", _render_one_frame, VULKAN_FIX, needs=("packages",)),
        ]
    return found


def _checkout(root: Path | None, line: Protocol) -> str:
    if root is None:
        raise CheckFailed("benchmarks.robotwin.robotwin_root is not set", f"set it to the checkout; {SETUP}")
    if not root.is_dir():
        raise CheckFailed(
            f"robotwin_root {root} does not exist on this node",
            "point benchmarks.robotwin.robotwin_root at a checkout here (scripts/setup_robotwin.sh makes one)",
        )
    try:
        checkout = RobotwinCheckout(root, line.name)
    except ConfigError as error:  # names what is missing, or the protocol whose layout it has
        raise CheckFailed(str(error), f"set benchmarks.robotwin.protocol to the checkout's line, or {SETUP}") from None
    kind = "stand-in checkout, no simulator" if (root / STANDIN_MARKER).is_file() else f"commit {_commit(root)}"
    return f"{checkout.root} ({line.name} layout, {kind})"


def _commit(root: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown (not a git checkout)"


def _assets_fix(root: Path | None, line: Protocol) -> str:
    return f"cd {root or '<checkout>'} && bash {line.script_dir}/_download_assets.sh (or {SETUP})"


def _assets(root: Path | None, task_configs: list[str], line: Protocol) -> str:
    assert root is not None
    needed = [name for name, used_by in ASSETS.items() if used_by is None or set(used_by) & set(task_configs)]
    missing = [name for name in needed if not _non_empty(root / "assets" / name)]
    if missing:
        raise CheckFailed(f"missing or empty under {root / 'assets'}: {', '.join(missing)}")
    templates = sorted((root / "assets" / "embodiments").rglob("*_tmp.yml"))
    unconfigured = [t for t in templates if not t.with_name(t.name.replace("_tmp.yml", ".yml")).is_file()]
    if unconfigured:
        raise CheckFailed(
            f"embodiment configs not generated from {unconfigured[0].relative_to(root)} (and "
            f"{len(unconfigured) - 1} more)",
            f"cd {root} && python {line.script_dir}/update_embodiment_config_path.py",
        )
    return ", ".join(needed)


def _non_empty(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _packages() -> str:
    versions = []
    for name in PACKAGES:
        try:
            module = importlib.import_module(name)
        except Exception as error:
            raise CheckFailed(f"import {name} failed: {type(error).__name__}: {error}") from error
        versions.append(f"{name} {getattr(module, '__version__', '?')}")
    return ", ".join(versions)


def _patches() -> str:
    unpatched = []
    for package, relative, unpatched_text, effect in PATCHES:
        module = importlib.import_module(package)
        path = Path(module.__file__ or "").parent / relative
        if not path.is_file():
            raise CheckFailed(f"{path} not found: not the {package} version upstream's installer patches")
        if unpatched_text in path.read_text(encoding="utf-8"):
            unpatched.append(f"{path} ({effect})")
    if unpatched:
        raise CheckFailed(f"upstream's script/_install.sh patches are not applied: {'; '.join(unpatched)}")
    return "sapien urdf_loader and mplib planner patched as upstream's script/_install.sh does"


def _task_module(root: Path | None, line: Protocol) -> str:
    assert root is not None
    checkout = RobotwinCheckout(root, line.name)
    with checkout.activated():
        module = importlib.import_module(f"envs.{PROBE_TASK}")
    origin = Path(module.__file__ or "").resolve()
    if not origin.is_relative_to(checkout.root):
        raise CheckFailed(f"envs.{PROBE_TASK} was imported from {origin}, not from {checkout.root}")
    if not hasattr(module, PROBE_TASK):
        raise CheckFailed(f"{origin} defines no class {PROBE_TASK}")
    return f"envs.{PROBE_TASK} from {origin.parent}"


def _cuda() -> str:
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise CheckFailed(
            f"torch {torch.__version__} sees no CUDA device (CUDA_VISIBLE_DEVICES={visible}; torch built for CUDA "
            f"{torch.version.cuda})"
        )
    return f"CUDA_VISIBLE_DEVICES={visible}: {torch.cuda.get_device_name(0)} (torch {torch.__version__})"


def _render_one_frame() -> str:
    """One frame through SAPIEN with upstream's renderer settings (Base_Task.setup_scene): a node without a working
    Vulkan device fails here, as every RoboTwin episode would at its first camera."""
    import numpy as np
    import sapien.core as sapien
    from sapien.render import set_global_config

    try:
        engine = sapien.Engine()
        set_global_config(max_num_materials=50000, max_num_textures=50000)
        renderer = sapien.SapienRenderer()
        engine.set_renderer(renderer)
        sapien.render.set_camera_shader_dir("rt")
        sapien.render.set_ray_tracing_samples_per_pixel(32)
        sapien.render.set_ray_tracing_path_depth(8)
        sapien.render.set_ray_tracing_denoiser("oidn")
        scene = engine.create_scene(sapien.SceneConfig())
        scene.set_ambient_light([0.5, 0.5, 0.5])
        scene.add_directional_light([0, 0.5, -1], [0.5, 0.5, 0.5], shadow=True)
        camera = scene.add_camera(name="node_check", width=64, height=48, fovy=np.deg2rad(45), near=0.1, far=100)
        scene.update_render()
        camera.take_picture()
        rgba = np.asarray(camera.get_picture("Color"))
    except Exception as error:
        raise CheckFailed(f"SAPIEN cannot render: {type(error).__name__}: {error}{_vulkan_summary()}") from error
    if rgba.shape[:2] != (48, 64):
        raise CheckFailed(f"SAPIEN rendered a {list(rgba.shape)} picture for a 64x48 camera")
    return f"one 64x48 frame rendered by SAPIEN {sapien.__version__} (ray-tracing shader, OIDN denoiser)"


def _vulkan_summary() -> str:
    tool = shutil.which("vulkaninfo")
    if tool is None:
        return "; vulkaninfo is not installed (apt install vulkan-tools) to say more"
    try:
        done = subprocess.run([tool, "--summary"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"; vulkaninfo --summary did not answer: {error}"
    devices = [line.split("=", 1)[1].strip() for line in done.stdout.splitlines() if "deviceName" in line]
    if done.returncode != 0 or not devices:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [f"exit {done.returncode}"]
        return f"; vulkaninfo --summary finds no device: {last[0][:200]}"
    return f"; vulkaninfo --summary lists {', '.join(devices)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the RoboTwin checkout")
    parser.add_argument(
        "--task-configs",
        nargs="+",
        default=sorted({c for used in ASSETS.values() if used for c in used} | {"demo_clean"}),
        help="the task configs whose assets are needed (default: both)",
    )
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default=DEFAULT, help="upstream's line")
    parser.add_argument("--only", nargs="+", default=None, metavar="CHECK", help="run only these checks")
    args = parser.parse_args(argv)
    selected: list[NodeCheck] = checks(str(Path(args.root).resolve()), args.task_configs, args.protocol)
    if args.only:
        selected = [check for check in selected if check.name in args.only]
    results = run_checks("robotwin", selected)
    for result in results:
        print(result.line(), flush=True)
    return 0 if all(result.ok for result in results) else 1


def node_checks(settings: RobotwinSettings) -> list[NodeCheck]:
    """The adapter's hook: the checks for the benchmark's settings."""
    return checks(settings.robotwin_root, list(settings.task_configs), settings.protocol)


if __name__ == "__main__":
    sys.exit(main())
