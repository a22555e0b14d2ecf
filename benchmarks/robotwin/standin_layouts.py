"""Lay the stand-in RoboTwin checkout out as upstream's `main` line (benchmarks/robotwin/protocols.py), from the one
stand-in tree kept in the repository (benchmarks/robotwin/standin_checkout, stable_2.0's layout):

- task configs moved from task_config/ to env_cfg/task_config/, and envs/_GLOBAL_CONFIGS.py's CONFIGS_PATH (and
  SCRIPT_PATH, script/ -> scripts/) pointing there, as main's does;
- `eval_instruction` added to each task config with main's values (demo_clean: seen, demo_randomized: unseen);
- nothing else changes (main's envs code, step limits, embodiment and camera configs equal stable_2.0's).

    python -m benchmarks.robotwin.standin_layouts DEST      # writes the main-layout stand-in into DEST (new)

Tests point benchmarks.robotwin.robotwin_root at DEST with `protocol: main`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from evalwf.common.paths import PROJECT_ROOT

STABLE_TREE = PROJECT_ROOT / "benchmarks" / "robotwin" / "standin_checkout"
MAIN_EVAL_INSTRUCTION = {"demo_clean": "seen", "demo_randomized": "unseen"}


def lay_main_checkout(dest: Path) -> Path:
    """Write the main-layout stand-in into `dest` (which must not exist yet); returns its path."""
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: the main-layout stand-in is written into a new directory")
    shutil.copytree(STABLE_TREE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "env_cfg").mkdir()
    (dest / "task_config").rename(dest / "env_cfg" / "task_config")
    for name, kind in MAIN_EVAL_INSTRUCTION.items():
        path = dest / "env_cfg" / "task_config" / f"{name}.yml"
        path.write_text(path.read_text(encoding="utf-8") + f"eval_instruction: {kind}\n", encoding="utf-8")
    configs = dest / "envs" / "_GLOBAL_CONFIGS.py"
    text = configs.read_text(encoding="utf-8")
    for old, new in (('"task_config/"', '"env_cfg/task_config/"'), ('"script/"', '"scripts/"')):
        if old not in text:
            raise RuntimeError(f"{configs}: {old} not found; update benchmarks/robotwin/standin_layouts.py")
        text = text.replace(old, new)
    configs.write_text(text, encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="a new directory")
    print(lay_main_checkout(parser.parse_args(argv).dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
