"""`evalwf manifests export RUN -o FILE` / `evalwf manifests import FILE`: hand the sealed manifests of a run (which
episodes: seeds, initial states, instruction texts) to another clone or lab as one content-addressed bundle
(evalwf.plan.bundle).

    evalwf manifests export results/<run> -o run.bundle        # prints the bundle's hash
    evalwf manifests import run.bundle --configfile CONFIG      # into the config's manifest_cache (or --cache DIR)

Import verifies every file first and refuses a bundle with any file that does not match, naming it; then snakemake
with that config restores those manifests by their hash instead of building them. A manifest is only used where
its definition (the environment included: interpreter, package versions, simulator commit) is the one planned here.

Exit status: 0 done, 1 refused (the reason printed), 2 usage.
"""

from __future__ import annotations

import argparse
import sys

from evalwf.common.errors import ConfigError, ManifestError
from evalwf.plan.bundle import export_bundle, import_bundle
from evalwf.plan.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalwf manifests", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="action", required=True)
    export = commands.add_parser("export", help="write a run's sealed manifests as one bundle")
    export.add_argument("run", help="the run's results directory (results/<run>)")
    export.add_argument("-o", "--output", required=True, help="the bundle file to write")
    imported = commands.add_parser("import", help="verify a bundle and put its manifests into the manifest cache")
    imported.add_argument("bundle")
    where = imported.add_mutually_exclusive_group(required=True)
    where.add_argument("--configfile", nargs="+", metavar="CONFIG", help="its manifest_cache receives them")
    where.add_argument("--cache", help="the manifest cache directory")
    args = parser.parse_args(argv)
    try:
        if args.action == "export":
            bundle = export_bundle(args.run, args.output)
            print(f"{args.output}: {len(bundle.files)} manifest(s), bundle sha256 {bundle.digest}")
            return 0
        cache = args.cache or load_config(*args.configfile).manifest_cache
        bundle, added = import_bundle(args.bundle, cache)
    except (ManifestError, ConfigError) as error:
        print(f"evalwf manifests {args.action}: {error}", file=sys.stderr)
        return 1
    print(
        f"{args.bundle}: bundle sha256 {bundle.digest} verified; {len(bundle.files)} manifest(s) in {cache} "
        f"({len(added)} new)"
    )
    return 0
