"""Import a RoboTwin checkout (real, or the stand-in under benchmarks/robotwin/standin_checkout) the way
upstream's script/eval_policy.py does: from its root directory, with `envs` and `description/utils` importable.

Nothing here is imported at Snakefile parse time except `resolve_root`, `task_config_sha256` and
`checkout_identity` (no simulator).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks.robotwin.protocols import Protocol, detect, protocol
from evalwf.benchmark.seeds import preserved_global_rng
from evalwf.common.errors import ConfigError, EnvironmentUnavailable
from evalwf.common.paths import PROJECT_ROOT

# Modules a checkout provides; purged from sys.modules when another checkout was imported before.
_CHECKOUT_MODULES = ("envs", "generate_episode_instructions")


def resolve_root(configured: str | None) -> Path | None:
    """robotwin_root as configured: absolute, or relative to the project root (evalwf.common.paths: the directory
    holding the benchmarks package, where benchmarks/robotwin/standin_checkout is found in a checkout and a wheel)."""
    if not configured:
        return None
    path = Path(os.path.expanduser(configured))
    return path if path.is_absolute() else PROJECT_ROOT / path


def task_config_sha256(configured_root: str | None, task_config: str, protocol_name: str | None = None) -> str | None:
    """Content hash of <config dir>/<name>.yml (the protocol's layout) when the checkout is present here, else None
    (cheap)."""
    root = resolve_root(configured_root)
    path = root / protocol(protocol_name).config_dir / f"{task_config}.yml" if root else None
    if path is None or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


# What of a checkout without git metadata defines its episodes (the stand-in, an unpacked archive): its code, task
# configs and instruction templates; not assets/ (data, gigabytes), policy/ (policies and their environments).
CODE_FOLDERS = ("envs", "task_config", "env_cfg", "description")  # env_cfg/task_config: main's layout
CODE_SUFFIXES = (".py", ".yml", ".yaml", ".json")


def checkout_identity(root: Path) -> str:
    """Which RoboTwin code a checkout holds, read without running anything (it is read at every parse):
    "git:<commit>" of its HEAD, read from .git (a worktree's or submodule's `.git` file followed, packed refs
    included; uncommitted changes are not seen); without .git, "files-sha256:<hash>" of the relative path and bytes
    of every code file under CODE_FOLDERS (the stand-in checkout has no .git: its content is what it is)."""
    if not root.is_dir():
        raise EnvironmentUnavailable(
            f"config key 'benchmarks.robotwin.robotwin_root': {root} does not exist on {socket.gethostname()}"
        )
    git = root / ".git"
    if git.exists():
        return f"git:{_git_head(root, git)}"
    digest = hashlib.sha256()
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in CODE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                digest.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
                digest.update(path.read_bytes())
    return f"files-sha256:{digest.hexdigest()}"


def _git_head(root: Path, git: Path) -> str:
    """The commit HEAD names, from the repository's files (git itself may refuse a checkout another user owns)."""
    gitdir = git
    if git.is_file():  # a worktree or a submodule: "gitdir: <path>"
        gitdir = (root / git.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
    common = gitdir
    if (gitdir / "commondir").is_file():  # a worktree's refs live in the main repository
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    try:
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return _commit(head, root)
        ref = head.split(":", 1)[1].strip()
        for directory in (gitdir, common):
            if (directory / ref).is_file():
                return _commit((directory / ref).read_text(encoding="utf-8").strip(), root)
        packed = common / "packed-refs"
        for line in packed.read_text(encoding="utf-8").splitlines() if packed.is_file() else []:
            sha, _, name = line.partition(" ")
            if name == ref:
                return _commit(sha, root)
    except OSError as error:
        raise EnvironmentUnavailable(f"RoboTwin checkout {root}: cannot read its git HEAD ({error})") from None
    raise EnvironmentUnavailable(f"RoboTwin checkout {root}: HEAD names {ref}, which is neither a file nor packed")


def _commit(text: str, root: Path) -> str:
    if len(text) not in (40, 64) or any(c not in "0123456789abcdef" for c in text):
        raise EnvironmentUnavailable(f"RoboTwin checkout {root}: its git HEAD is not a commit id ({text[:80]!r})")
    return text


def _load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.load(handle.read(), Loader=yaml.FullLoader)


@contextlib.contextmanager
def simulator_rng_guard() -> Iterator[None]:
    """RoboTwin's setup_demo seeds the global numpy and torch RNGs; the caller's states are restored after
    (numpy, Python random, and torch's CPU and - once initialised - CUDA generators when torch is imported)."""
    torch = sys.modules.get("torch")
    cpu_state = torch.get_rng_state() if torch is not None else None
    cuda_states = None
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda_states = torch.cuda.get_rng_state_all()
    with preserved_global_rng():
        try:
            yield
        finally:
            if torch is not None and cpu_state is not None:
                torch.set_rng_state(cpu_state)
            if cuda_states is not None:
                torch.cuda.set_rng_state_all(cuda_states)


class RobotwinCheckout:
    """A RoboTwin checkout on disk: envs/, the task configs, description/utils/, laid out as the configured
    protocol's line (benchmarks/robotwin/protocols.py: task_config/ on stable_2.0, env_cfg/task_config/ on main)."""

    def __init__(self, root: str | os.PathLike[str], protocol_name: str | None = None):
        self.root = Path(root).resolve()
        self.protocol: Protocol = protocol(protocol_name)
        missing = [rel for rel in self.protocol.required() if not (self.root / rel).exists()]
        if not missing:
            return
        found = detect(self.root)
        if found is not None:
            raise ConfigError(
                f"benchmarks.robotwin.robotwin_root = {self.root} is a RoboTwin {found.name} checkout "
                f"({found.config_dir}/, {found.evaluator}), but benchmarks.robotwin.protocol is "
                f"{self.protocol.name} (which needs {', '.join(missing)}): set protocol: {found.name}, or check out "
                f"upstream's {self.protocol.branch} (scripts/setup_robotwin.sh --protocol {self.protocol.name})"
            )
        raise ConfigError(
            f"benchmarks.robotwin.robotwin_root = {self.root} is not a RoboTwin {self.protocol.name} checkout "
            f"(missing {', '.join(missing)}); point it at a clone of RoboTwin-Platform/RoboTwin "
            f"({self.protocol.branch}) with assets downloaded"
        )

    @classmethod
    def from_config(cls, configured_root: str | None, what: str, protocol_name: str | None = None) -> RobotwinCheckout:
        root = resolve_root(configured_root)
        if root is None:
            raise ConfigError(
                f"{what} needs a RoboTwin checkout: set benchmarks.robotwin.robotwin_root in the config to a clone "
                "of RoboTwin-Platform/RoboTwin (branch stable_2.0, assets downloaded, simulator environment "
                "active), or to benchmarks/robotwin/standin_checkout for the stand-in"
            )
        if not root.exists():
            raise ConfigError(f"{what}: benchmarks.robotwin.robotwin_root {root} does not exist on this machine")
        return cls(root, protocol_name)

    # ------------------------------------------------------------------ import
    @contextlib.contextmanager
    def activated(self) -> Iterator[RobotwinCheckout]:
        """Run from the checkout's root (upstream resolves ./assets, ./task_config relative to the cwd) with
        its packages importable; the caller's cwd is restored afterwards."""
        self._ensure_importable()
        previous = os.getcwd()
        os.chdir(self.root)
        try:
            yield self
        finally:
            os.chdir(previous)

    def _ensure_importable(self) -> None:
        for entry in (str(self.root / "description" / "utils"), str(self.root)):
            if entry in sys.path:
                sys.path.remove(entry)
            sys.path.insert(0, entry)
        for name in list(sys.modules):
            if name.split(".")[0] not in _CHECKOUT_MODULES:
                continue
            origin = getattr(sys.modules[name], "__file__", None)
            if origin and not Path(origin).resolve().is_relative_to(self.root):
                del sys.modules[name]  # imported from another checkout earlier in this process
        importlib.invalidate_caches()

    def make_env(self, task: str) -> Any:
        """class_decorator(task_name): envs.<task>.<task>()."""
        module = importlib.import_module(f"envs.{task}")
        try:
            env_class = getattr(module, task)
        except AttributeError:
            raise ConfigError(f"RoboTwin checkout {self.root}: envs/{task}.py defines no class {task}") from None
        env = env_class()
        remember_pristine_xlim(env)
        return env

    def unstable_error(self) -> type[BaseException]:
        return importlib.import_module("envs.utils.create_actor").UnStableError

    def description_generator(self) -> Callable[..., list[dict[str, Any]]]:
        return importlib.import_module("generate_episode_instructions").generate_episode_descriptions

    # ------------------------------------------------------------------ configs
    def task_config_path(self, task_config: str) -> Path:
        return self.root / self.protocol.config_dir / f"{task_config}.yml"

    def eval_instruction(self, task_config: str) -> str:
        """main: the task config's `eval_instruction` (the instruction type used when none is given); main's
        evaluator refuses a task config without one, and so does this."""
        path = self.task_config_path(task_config)
        value = str(_load_yaml(path).get("eval_instruction") or "").strip().lower() if path.is_file() else ""
        if value not in ("seen", "unseen"):
            raise ConfigError(
                f"{path}: eval_instruction must be 'seen' or 'unseen' (got {value or 'nothing'}); upstream main's task "
                "configs name it; or set benchmarks.robotwin.instruction_types"
            )
        return value

    def eval_args(self, task: str, task_config: str, policy_name: str = "remote-openpi") -> dict[str, Any]:
        """The `args` dict upstream's evaluator (eval_policy.py's main() on stable_2.0, load_task_args on main)
        passes to setup_demo (video logging left off)."""
        path = self.task_config_path(task_config)
        if not path.is_file():
            raise ConfigError(f"RoboTwin checkout {self.root} has no task config {path.name}")
        args = _load_yaml(path)
        args["task_name"] = task
        args["task_config"] = task_config
        args["ckpt_setting"] = policy_name
        data_type = args.setdefault("data_type", {}) if self.protocol.observation_flags else None
        for flag in self.protocol.observation_flags:  # main's ensure_xpolicylab_observation_flags
            data_type[flag] = True
        configs = self.root / self.protocol.config_dir
        embodiments = _load_yaml(configs / "_embodiment_config.yml")
        cameras = _load_yaml(configs / "_camera_config.yml")
        head = args["camera"]["head_camera_type"]
        args["head_camera_h"] = cameras[head]["h"]
        args["head_camera_w"] = cameras[head]["w"]

        def robot_file(name: str) -> str:
            file_path = embodiments[name]["file_path"]
            if file_path is None:
                raise ConfigError(f"RoboTwin checkout {self.root}: no embodiment files for {name}")
            return file_path

        embodiment = args.get("embodiment")
        if len(embodiment) == 1:
            args["left_robot_file"] = args["right_robot_file"] = robot_file(embodiment[0])
            args["dual_arm_embodied"] = True
        elif len(embodiment) == 3:
            args["left_robot_file"] = robot_file(embodiment[0])
            args["right_robot_file"] = robot_file(embodiment[1])
            args["embodiment_dis"] = embodiment[2]
            args["dual_arm_embodied"] = False
        else:
            raise ConfigError(f"{path}: embodiment must have 1 or 3 items, got {embodiment!r}")
        for side in ("left", "right"):
            robot_dir = Path(args[f"{side}_robot_file"])
            robot_dir = robot_dir if robot_dir.is_absolute() else self.root / robot_dir
            args[f"{side}_embodiment_config"] = _load_yaml(robot_dir / "config.yml")
        # Batch mode writes no upstream videos (eval_video_save_dir unset -> TASK_ENV.eval_video_path is None);
        # the video only reads the observation, so outcomes are unaffected.
        args["eval_video_log"] = False
        args["policy_name"] = policy_name
        args["eval_mode"] = True
        return args


def _xlim_default(env: Any) -> list[float] | None:
    function = getattr(type(env), "get_cluttered_table", None)
    if function is None:
        return None
    try:
        parameter = inspect.signature(function).parameters.get("xlim")
    except (TypeError, ValueError):
        return None
    default = None if parameter is None else parameter.default
    return default if isinstance(default, list) else None


_PRISTINE_XLIM: dict[int, list[float]] = {}


def remember_pristine_xlim(env: Any) -> None:
    """Record the default xlim as a fresh process has it (call right after the env class is first imported)."""
    default = _xlim_default(env)
    if default is not None:
        _PRISTINE_XLIM.setdefault(id(type(env).get_cluttered_table), [float(v) for v in default])


def clutter_xlim_default(env: Any) -> list[float] | None:
    """The current value of get_cluttered_table's mutable default xlim. Upstream shifts it in place on every
    cluttered setup of a task with a table_xy_bias, so it is hidden state carried from setup to setup (and,
    being a default of Base_Task's method, from task to task within one process)."""
    default = _xlim_default(env)
    return [float(v) for v in default] if default is not None else None


def set_clutter_xlim_default(env: Any, values: list[float] | None = None) -> list[float] | None:
    """Set the mutable default to `values` (a value recorded by the sequential loop) or, without values, back to
    what a fresh process has. Returns the value set, None where the checkout has no such default."""
    default = _xlim_default(env)
    if default is None:
        return None
    if values is None:
        values = _PRISTINE_XLIM.get(id(type(env).get_cluttered_table))
        if values is None:
            return None
    default[:] = [float(v) for v in values]
    return list(default)
