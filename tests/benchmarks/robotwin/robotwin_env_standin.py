"""Stand-ins for what a RoboTwin GPU node holds, for tests that cannot have the real thing (no GPU, no network):
SAPIEN, mplib, cuRobo, pytorch3d and torch packages (as wheels that real pip installs, or as a plain directory),
the node's tools (conda, nvidia-smi, nvcc, vulkaninfo) and a RoboTwin checkout whose script/_install.sh and
script/_download_assets.sh behave like upstream's: written to run from the checkout's root, not stopping after a
failed line (exit status 0), cloning cuRobo into envs/.

Where the node matters they fail as the real ones do: without a Vulkan driver (VK_ICD_FILENAMES naming no file, as
the Vulkan loader reads it) SAPIEN's renderer cannot be created and vulkaninfo finds no driver; torch sees CUDA only
where STANDIN_NO_CUDA is unset; sapien and mplib ship the lines upstream's installer patches.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from lightenv import py310_python

REPO = Path(__file__).resolve().parents[3]
STANDIN_CHECKOUT = REPO / "benchmarks" / "robotwin" / "standin_checkout"
STANDIN_GPU_UUID = "GPU-5eed0000-0000-0000-0000-000000000000"

_VULKAN = '''import os


def vulkan_driver_error():
    """The Vulkan loader's view: VK_ICD_FILENAMES, when set, names the only driver manifests it reads."""
    files = [f for f in os.environ.get("VK_ICD_FILENAMES", "").split(os.pathsep) if f]
    if files and not any(os.path.isfile(f) for f in files):
        return "vk::createInstanceUnique: ErrorIncompatibleDriver"
    return None
'''
_SAPIEN_INIT = """__version__ = "3.0.0b1"
from . import render
from ._vulkan import vulkan_driver_error


class SceneConfig:
    pass


class _Entity:
    def set_pose(self, pose):
        self.pose = pose


class _Camera:
    def __init__(self, name, width, height):
        self.name, self.width, self.height, self.entity, self._taken = name, width, height, _Entity(), False

    def take_picture(self):
        self._taken = True

    def get_picture(self, name):
        import numpy as np

        assert self._taken and name == "Color"
        return np.full((self.height, self.width, 4), 0.5, dtype=np.float32)


class Scene:
    def set_ambient_light(self, color):
        self.ambient = color

    def add_directional_light(self, direction, color, shadow=False):
        return (direction, color, shadow)

    def add_camera(self, name, width, height, fovy, near, far):
        return _Camera(name, width, height)

    def update_render(self):
        pass


class SapienRenderer:
    def __init__(self):
        error = vulkan_driver_error()
        if error:
            raise RuntimeError(error)


class Engine:
    def set_renderer(self, renderer):
        self.renderer = renderer

    def create_scene(self, config=None):
        return Scene()
"""
_SAPIEN_RENDER = """def set_global_config(**settings):
    pass


def set_camera_shader_dir(path):
    pass


def set_ray_tracing_samples_per_pixel(count):
    pass


def set_ray_tracing_path_depth(depth):
    pass


def set_ray_tracing_denoiser(name):
    pass
"""
# the lines of sapien 3.0.0b1 and mplib 0.2.1 that upstream's script/_install.sh edits with sed
_URDF_LOADER = """def parse(urdf_file, srdf_file=None):
    with open(urdf_file, "r") as f:
        urdf_string = f.read()
    if srdf_file is None:
        srdf_file = urdf_file[:-4] + "srdf"
    with open(srdf_file, "r") as f:
        return urdf_string, f.read()
"""
_PLANNER = """def plan_screw(delta_twist, collide, within_joint_limit):
    import numpy as np

    if True:
            if np.linalg.norm(delta_twist) < 1e-4 or collide or not within_joint_limit:
                return {"status": "screw plan failed"}
    return {"status": "Success"}
"""
_TORCH = """import os
from types import SimpleNamespace

__version__ = "2.4.1"
version = SimpleNamespace(cuda="12.1")


class cuda:
    @staticmethod
    def is_available():
        return "STANDIN_NO_CUDA" not in os.environ

    @staticmethod
    def device_count():
        return 1 if cuda.is_available() else 0

    @staticmethod
    def get_device_name(index=0):
        return "Stand-in GPU"
"""
PACKAGES: dict[str, tuple[str, dict[str, str]]] = {
    "torch": ("2.4.1", {"torch/__init__.py": _TORCH}),
    "torchvision": ("0.19.1", {"torchvision/__init__.py": '__version__ = "0.19.1"\n'}),
    "sapien": (
        "3.0.0b1",
        {
            "sapien/__init__.py": _SAPIEN_INIT,
            "sapien/_vulkan.py": _VULKAN,
            "sapien/render.py": _SAPIEN_RENDER,
            "sapien/core/__init__.py": "from sapien import *  # noqa\nfrom sapien import render, __version__\n",
            "sapien/wrapper/__init__.py": "",
            "sapien/wrapper/urdf_loader.py": _URDF_LOADER,
        },
    ),
    "mplib": ("0.2.1", {"mplib/__init__.py": '__version__ = "0.2.1"\n', "mplib/planner.py": _PLANNER}),
    "pytorch3d": ("0.7.8", {"pytorch3d/__init__.py": '__version__ = "0.7.8"\n'}),
    "curobo": ("0.7.8", {"curobo/__init__.py": '__version__ = "0.7.8"\n'}),
    "open3d": ("0.18.0", {"open3d/__init__.py": '__version__ = "0.18.0"\n'}),
}


def patched(relative: str, text: str) -> str:
    """A file as upstream's installer leaves it (its two sed lines)."""
    if relative.endswith("urdf_loader.py"):
        return text.replace('"r") as', '"r", encoding="utf-8") as')
    if relative.endswith("planner.py"):
        return text.replace("or collide or not", "or not")
    return text


def write_packages(target: Path, names: tuple[str, ...] = ("torch", "sapien", "mplib", "pytorch3d", "curobo")) -> Path:
    """The packages as a plain directory (to put on an interpreter's path), patched as upstream's installer does."""
    for name in names:
        for relative, text in PACKAGES[name][1].items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(patched(relative, text))
    return target


def write_wheel(directory: Path, name: str) -> Path:
    """A wheel real pip installs (metadata and RECORD with hashes), unpatched."""
    version, files = PACKAGES[name]
    info = f"{name}-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    contents[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: standin\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for relative, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{relative},sha256={digest},{len(text.encode())}")
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for relative, text in contents.items():
            wheel.writestr(relative, text)
    return path


def make_env(prefix: Path) -> Path:
    """What `conda create -p PREFIX python=3.10` leaves: a Python 3.10 environment with pip and bin/pip. Here: a
    venv of .venv-py310's interpreter (`make py310-env`) that also sees its packages (the light core at the pins
    scripts/setup_robotwin.sh installs, numpy 1.26, pip), so nothing needs an index; what is installed into it lands
    in its own site-packages."""
    base = py310_python()
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(prefix)], check=True)
    python = prefix / "bin" / "python"
    Path(purelib(python), "py310_base.pth").write_text(f"{purelib(base)}\n")
    pip = prefix / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
    pip.chmod(0o755)
    return python


def purelib(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def fake_tools(bin_dir: Path, *, gpu: bool = True, nvcc: bool = True, vulkaninfo: bool = True) -> Path:
    """conda, nvidia-smi, nvcc and vulkaninfo as a node has them (each left out on request); returns CUDA_HOME."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tests = Path(__file__).resolve().parent
    scripts = {
        "conda": (
            f"#!{sys.executable}\nimport sys\nsys.path[:0] = [{str(tests)!r}, {str(tests.parents[1])!r}]\n"
            "from robotwin_env_standin import conda_main\nsys.exit(conda_main(sys.argv[1:]))\n"
        )
    }
    if gpu:
        scripts["nvidia-smi"] = f"#!/bin/sh\necho 'GPU 0: Stand-in GPU (UUID: {STANDIN_GPU_UUID})'\n"
    if vulkaninfo:
        scripts["vulkaninfo"] = (
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(bin_dir)!r})\n"
            "from _vulkan import vulkan_driver_error\nerror = vulkan_driver_error()\n"
            "if error:\n    print('ERROR: [Loader Message] vkCreateInstance: Found no drivers!', file=sys.stderr)\n"
            "    sys.exit(1)\nprint('Devices:\\n========\\nGPU0:\\n\\tdeviceName         = Stand-in GPU')\n"
        )
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "_vulkan.py").write_text(_VULKAN)
    cuda_home = bin_dir.parent / "cuda"
    if nvcc:
        (cuda_home / "bin").mkdir(parents=True, exist_ok=True)
        nvcc_path = cuda_home / "bin" / "nvcc"
        nvcc_path.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.1, V12.1.105'\n")
        nvcc_path.chmod(0o755)
        (bin_dir / "nvcc").symlink_to(nvcc_path)
    return cuda_home


def conda_main(argv: list[str]) -> int:
    """`conda create -y -p PREFIX python=3.10`, the only call setup_robotwin.sh makes."""
    if argv[:1] != ["create"] or "-p" not in argv:
        print(f"stand-in conda: unsupported call {argv}", file=sys.stderr)
        return 2
    make_env(Path(argv[argv.index("-p") + 1]))
    return 0


INSTALLER = """echo "Installing the necessary packages ..."
pip install -r script/requirements.txt

echo "Installing pytorch3d ..."
pip install pytorch3d --no-build-isolation

echo "Adjusting code in sapien/wrapper/urdf_loader.py ..."
SAPIEN_LOCATION=$(pip show sapien | grep 'Location' | awk '{print $2}')/sapien
URDF_LOADER=$SAPIEN_LOCATION/wrapper/urdf_loader.py
sed -i -E 's/("r")(\\))( as)/\\1, encoding="utf-8") as/g' $URDF_LOADER

echo "Adjusting code in mplib/planner.py ..."
MPLIB_LOCATION=$(pip show mplib | grep 'Location' | awk '{print $2}')/mplib
PLANNER=$MPLIB_LOCATION/planner.py
sed -i -E 's/(if np.linalg.norm\\(delta_twist\\) < 1e-4 )(or collide )(or not within_joint_limit:)/\\1\\3/g' $PLANNER

echo "Installing Curobo ..."
cd envs
git clone --depth 1 "$STANDIN_CUROBO_URL" curobo
cd curobo
pip install dist/curobo-0.7.8-py3-none-any.whl
cd ../..

echo "Installation basic environment complete!"
"""
# main's scripts/_install.sh (cf47ab5): cds to the checkout itself, then the same lines under scripts/, plus a call of
# scripts/update_xpolicylab.sh (which moves XPolicyLab to its newest commit: setup_robotwin.sh must not run it; the
# stand-in's fails loudly) and `pip install -e XPolicyLab` (left out: the stand-in has no XPolicyLab submodule)
MAIN_INSTALLER = (
    'ROBOTWIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"\ncd "${ROBOTWIN_ROOT}"\n\n'
    + INSTALLER.replace("script/requirements.txt", "scripts/requirements.txt").replace(
        'echo "Adjusting code in sapien',
        'echo "Preparing XPolicyLab ..."\nbash "${ROBOTWIN_ROOT}/scripts/update_xpolicylab.sh"\n\n'
        'echo "Adjusting code in sapien',
    )
)
UPDATE_XPOLICYLAB = 'echo "update_xpolicylab.sh: would fetch the newest XPolicyLab" >&2\nexit 9\n'
DOWNLOAD_ASSETS = """cd assets
python _download.py

# background_texture
unzip background_texture.zip
rm -rf background_texture.zip

# embodiments
unzip embodiments.zip
rm -rf embodiments.zip

# objects
unzip objects.zip
rm -rf objects.zip

cd ..
echo "Configuring Path ..."
python ./script/update_embodiment_config_path.py
"""
DOWNLOAD_PY = """import os, shutil
for name in ("background_texture.zip", "embodiments.zip", "objects.zip"):  # upstream: from the Hugging Face hub
    shutil.copy(os.path.join(os.environ["STANDIN_ASSET_ZIPS"], name), name)
"""


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _commit_repo(work: Path, bare: Path, branch: str) -> str:
    _git("init", "-q", "-b", branch, cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "stand-in", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=work.parent)
    return _git("rev-parse", "HEAD", cwd=work)


def robotwin_repo(base: Path, requirements: str = "sapien==3.0.0b1\nmplib==0.2.1\n") -> tuple[Path, str]:
    """A bare repository (branch stable_2.0) holding a stand-in checkout with upstream's installer layout: the
    stand-in checkout of the tests without its STANDIN marker and assets (they come from the asset zips)."""
    work = base / "robotwin-work"
    shutil.copytree(STANDIN_CHECKOUT, work, ignore=shutil.ignore_patterns("STANDIN", "__pycache__"))
    shutil.rmtree(work / "assets")
    (work / "assets").mkdir()
    (work / "assets" / "_download.py").write_text(DOWNLOAD_PY)
    (work / "script").mkdir()
    (work / "script" / "_install.sh").write_text(INSTALLER)
    (work / "script" / "_download_assets.sh").write_text(DOWNLOAD_ASSETS)
    (work / "script" / "requirements.txt").write_text(requirements)
    (work / "script" / "update_embodiment_config_path.py").write_text("print('Configuring Path ... done')\n")
    return base / "robotwin.git", _commit_repo(work, base / "robotwin.git", "stable_2.0")


def robotwin_main_repo(base: Path, requirements: str = "sapien==3.0.0b1\nmplib==0.2.1\n") -> tuple[Path, str]:
    """As robotwin_repo, laid out as upstream's main (branch main): env_cfg/task_config/, scripts/ (its installer,
    asset download, update_xpolicylab.sh)."""
    from benchmarks.robotwin.standin_layouts import lay_main_checkout

    work = lay_main_checkout(base / "robotwin-work")
    (work / "STANDIN").unlink()
    shutil.rmtree(work / "assets")
    (work / "assets").mkdir()
    (work / "assets" / "_download.py").write_text(DOWNLOAD_PY)
    (work / "scripts").mkdir()
    (work / "scripts" / "_install.sh").write_text(MAIN_INSTALLER)
    (work / "scripts" / "update_xpolicylab.sh").write_text(UPDATE_XPOLICYLAB)
    (work / "scripts" / "_download_assets.sh").write_text(DOWNLOAD_ASSETS.replace("./script/", "./scripts/"))
    (work / "scripts" / "requirements.txt").write_text(requirements)
    (work / "scripts" / "update_embodiment_config_path.py").write_text("print('Configuring Path ... done')\n")
    return base / "robotwin.git", _commit_repo(work, base / "robotwin.git", "main")


def curobo_repo(base: Path, wheels: Path) -> Path:
    """cuRobo's repository as upstream's installer clones it (here with a built wheel in dist/)."""
    work = base / "curobo-work"
    (work / "dist").mkdir(parents=True)
    shutil.copy(wheels / f"curobo-{PACKAGES['curobo'][0]}-py3-none-any.whl", work / "dist")
    _commit_repo(work, base / "curobo.git", "main")
    return base / "curobo.git"


def asset_zips(directory: Path, background_texture: bool = True) -> Path:
    """The three zips upstream downloads; without background_texture its zip holds no such folder."""
    directory.mkdir(parents=True, exist_ok=True)
    embodiment = (STANDIN_CHECKOUT / "assets" / "embodiments" / "aloha-agilex" / "config.yml").read_text()
    contents = {
        "embodiments.zip": {"embodiments/aloha-agilex/config.yml": embodiment},
        "objects.zip": {"objects/001_bottle/model_data0.json": "{}\n"},
        "background_texture.zip": {"background_texture/0.png": "png"} if background_texture else {"README": "-"},
    }
    for name, files in contents.items():
        with zipfile.ZipFile(directory / name, "w") as archive:
            for relative, text in files.items():
                archive.writestr(relative, text)
    return directory
