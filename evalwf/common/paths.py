"""Where this package lives, found with importlib.resources (so an installed wheel works as a checkout does).

PROJECT_ROOT is the directory holding the `evalwf` and `benchmarks` packages: a checkout's root, or site-packages of
an installed wheel (which ships benchmarks/robotwin/standin_checkout too). Relative paths in a config
(benchmarks.<name>.python, benchmarks.robotwin.robotwin_root) are resolved against it, and simulator steps get
it on PYTHONPATH. The workflow, config and profiles folders sit at a checkout's root; a wheel carries them inside
the package (pyproject.toml force-include): `shipped` finds either. `python -m evalwf.common.paths` prints the
Snakefile of an installed wheel, for `snakemake -s` (an internal helper the README names for wheel installs).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGE = Path(str(resources.files("evalwf")))
PROJECT_ROOT = PACKAGE.parent


def shipped(folder: str) -> Path:
    """`workflow`, `config` or `profiles`: inside the installed package, else at the checkout's root."""
    packaged = PACKAGE / folder
    return packaged if packaged.is_dir() else PROJECT_ROOT / folder


def snakefile() -> Path:
    return shipped("workflow") / "Snakefile"


if __name__ == "__main__":  # python -m evalwf.common.paths: the Snakefile to pass to snakemake -s
    print(snakefile())
