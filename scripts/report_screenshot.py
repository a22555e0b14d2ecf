"""Screenshot of the Snakemake report's landing page: `python scripts/report_screenshot.py [--out docs/report.png]`.

Runs the small stand-in campaign (config/standin.yaml with made-up reference scores) in a temporary directory
with profiles/local, builds `snakemake --report`, and photographs the landing page with headless Chromium at 1400x900
(Debian's `chromium`: make test-tools). The PNG is what README shows. `--report FILE` photographs an existing report.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from headless_chromium import page_view  # scripts/ is this script's first import path

REPO = Path(__file__).resolve().parents[1]


def build_report(workdir: Path) -> Path:
    config = yaml.safe_load((REPO / "config" / "standin.yaml").read_text())
    config["reference"] = {"source": "illustrative numbers", "standin": {"alpha": 60.0, "beta": 45.0}}
    configfile = workdir / "campaign.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    snakemake = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile")]
    common = ["--directory", str(workdir), "--configfile", str(configfile)]
    subprocess.run([*snakemake, *common, "--profile", str(REPO / "profiles" / "local")], check=True, cwd=workdir)
    report = workdir / "report.html"
    subprocess.run([*snakemake, *common, "--report", str(report)], check=True, cwd=workdir)
    return report


def screenshot(report: Path, out: Path, width: int, height: int) -> None:
    """The landing page as the browser tests see it (scripts/headless_chromium.py), at scroll 0."""
    view = page_view(report.resolve().as_uri(), ["#evalwf-title"], width=width, height=height, ready="#evalwf-title")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(view.png)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report.png")
    parser.add_argument("--report", type=Path, help="an existing report.html (default: build one)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evalwf-report-") as workdir:
        report = args.report or build_report(Path(workdir))
        screenshot(report, args.out, args.width, args.height)
    print(f"{args.out}: {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
