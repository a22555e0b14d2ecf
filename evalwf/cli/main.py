"""`evalwf`: one command for the parts a user runs by hand. `plan` previews a campaign (what it contains, what
is done, what the rest costs); `status`, `task`, `worker`, `compare`, `export`, `policy`, `doctor`, `benchmark` and
`demo` hand their arguments unchanged to the module that owns each (DELEGATED), whose parser is the single definition
of its options; `python -m evalwf <subcommand>` is the same command."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from importlib import metadata

import yaml

DISTRIBUTION = "policy-eval-workflow"


@contextlib.contextmanager
def _program_name(name: str) -> Iterator[None]:
    """The delegated parsers name themselves after sys.argv[0]: make their usage read `evalwf <command>`."""
    saved = sys.argv[0] if sys.argv else ""
    if sys.argv:
        sys.argv[0] = name
    else:
        sys.argv.append(name)
    try:
        yield
    finally:
        sys.argv[0] = saved


def _delegate(module: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        return importlib.import_module(module).main(argv)

    return run


def _demo(argv: list[str]) -> int:
    demo = importlib.import_module("evalwf.cli.demo")
    if argv[:1] in (["-h"], ["--help"]):
        print("usage: evalwf demo [CONFIG]\n\n" + (demo.__doc__ or "").strip())
        return 0
    return demo.main(argv)


POLICY_COMMANDS = {"check": "evalwf.cli.policy_check", "bench": "evalwf.cli.policy_bench"}


def _policy(argv: list[str]) -> int:
    """`evalwf policy check|bench ...` -> evalwf.cli.policy_check / evalwf.cli.policy_bench."""
    if argv[:1] and argv[0] in POLICY_COMMANDS:
        return importlib.import_module(POLICY_COMMANDS[argv[0]]).main(argv[1:])
    print(
        "usage: evalwf policy check --configfile CONFIG [CONFIG ...] [--policy NAME] [--repeat N]\n"
        "       evalwf policy bench --configfile CONFIG [CONFIG ...] [--policy NAME] [--slots 1,2,4,8,16,32] "
        "[--seconds S] [--json OUT] [--check-determinism]\n\n"
        "  check   each policy of the campaign (or NAME) against the benchmarks it evaluates, one observation"
        " each: metadata, action shape, latency\n"
        "  bench   observations/s, latency, batch, GPU memory and CPU per K concurrent slots; recommends --slots",
        file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout,
    )
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


DELEGATED: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "status": (_delegate("evalwf.report.status"), "live table of a run: done/pending/running/failed, success so far"),
    "worker": (_delegate("evalwf.worker.main"), "start GPU workers that run queued batches"),
    "task": (
        _delegate("evalwf.cli.task"),
        "one queued task: its state, attempts, the cause of its last error and its logs (the id a failure names)",
    ),
    "compare": (
        _delegate("evalwf.report.compare"),
        "per-suite and per-task differences of two runs (Newcombe intervals)",
    ),
    "export": (
        _delegate("evalwf.cli.export"),
        "a run's results into MLflow or Weights & Biases (offline): one tracker run per policy and benchmark",
    ),
    "demo": (_demo, "the embedded default end to end on this machine"),
    "policy": (
        _policy,
        "`policy check`: a smoke check of the policy server before spending GPU hours; `policy bench`: size a "
        "node's --slots with it",
    ),
    "serve": (
        _delegate("evalwf.policy.template"),
        "serve a Python policy (predict / predict_batch) over the openpi websocket protocol, batching requests",
    ),
    "doctor": (
        _delegate("evalwf.cli.doctor"),
        "is this node ready for a campaign: interpreters, GPU, renderer, assets, policy server (one line per check)",
    ),
    "manifests": (
        _delegate("evalwf.cli.manifests"),
        "`manifests export RUN -o FILE` / `manifests import FILE`: a run's episodes as one verified bundle",
    ),
    "benchmark": (
        _delegate("evalwf.cli.benchmark"),
        "`benchmark list|show|check`: the registered benchmarks, their settings, their simulator interpreters",
    ),
}


def _version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _overrides(pairs: list[str]) -> dict[str, object]:
    """--config KEY=VALUE as snakemake reads it: top-level keys, values parsed as YAML."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--config expects KEY=VALUE, got {pair!r}")
        parsed[key] = yaml.safe_load(value)
    return parsed


def _plan(args: argparse.Namespace) -> int:
    from evalwf.common.errors import ConfigError
    from evalwf.export.targets import check_trackers_installed, config_targets
    from evalwf.plan.budget import PLANNED_FILE, measure_took, planned_vs_took, read_planned_cost
    from evalwf.plan.campaign import Campaign
    from evalwf.plan.config import load_config
    from evalwf.plan.rounds import expected_batch_weights
    from evalwf.plan.table import build_plan, render_campaign, to_json

    try:
        campaign = Campaign(load_config(*args.configfile, overrides=_overrides(args.config)))
        check_trackers_installed(config_targets(campaign.config.document()))  # as the workflow refuses it
    except (ConfigError, OSError) as error:
        print(f"evalwf plan: {error}", file=sys.stderr)
        return 2
    weights = expected_batch_weights(campaign)  # an adaptive sweep's rounds, priced at their chance
    plans = {
        member.policy.name: build_plan(
            member,
            seconds_per_step=args.seconds_per_step,
            workers=getattr(args, "workers", None),  # None: the workers batch_size auto plans for, else 4
            batch_overhead_s=args.batch_overhead_s,
            weights=weights,
        )
        for member in campaign.policy_campaigns()  # one plan per policy, of the benchmarks it evaluates
    }
    planned, took = read_planned_cost(campaign), measure_took(campaign)
    cost = planned_vs_took(planned, took) if planned is not None or took.batches else None  # once it started
    if args.json:
        data = {"policies": {name: to_json(plan) for name, plan in plans.items()}}
        data = to_json(next(iter(plans.values()))) if not campaign.multi else data
        print(json.dumps({**data, "planned_vs_took": cost}, indent=1))
        return 0
    print(render_campaign(campaign, list(plans.values())))
    if cost is not None:
        print(f"Cost of run {campaign.run}: {cost} (planned: {PLANNED_FILE}, as submitted; took: its batch records)")
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from evalwf.common.commands import snakemake_command
    from evalwf.plan.table import DEFAULT_BATCH_OVERHEAD_S, DEFAULT_WORKERS

    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="evalwf",
        description="Parallel policy evaluation on LIBERO and RoboTwin (Snakemake + Labtasker).",
        epilog="Run a campaign with: "
        + snakemake_command("--profile", "profiles/labtasker", "--configfile", "config/<name>.yaml"),
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    plan = commands.add_parser(
        "plan",
        help="what a campaign contains, what is done, what the rest costs (before spending GPU hours)",
        description="Per benchmark and suite: tasks, episodes, batches, batches done (result file valid) and "
        "to run, manifests to build, policy identity; the expected GPU-hours and span on N workers.",
        formatter_class=formatter,
    )
    plan.add_argument(
        "--configfile",
        nargs="+",
        required=True,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="campaign config(s), composed as the workflow does (files that disagree are refused); relative paths "
        "in them resolve from here",
    )
    plan.add_argument(
        "--config", nargs="*", default=[], metavar="KEY=VALUE", help="top-level overrides, as snakemake's --config"
    )
    plan.add_argument(
        "--workers",
        type=_positive_int,
        default=argparse.SUPPRESS,
        metavar="N",
        help=f"workers (GPUs) for the span (default: the workers batch_size auto plans for, else {DEFAULT_WORKERS})",
    )
    plan.add_argument(
        "--seconds-per-step",
        type=_positive_float,
        default=None,
        metavar="S",
        help="assumed seconds per simulator step (with policy inference) for tasks of suites not measured yet "
        "(default: the benchmark's documented conservative figures, reset included)",
    )
    plan.add_argument(
        "--batch-overhead-s",
        type=_non_negative_float,
        default=None,
        metavar="S",
        help="dispatch overhead per batch added to the span (job-step start-up; default: measured between the "
        f"batches of earlier runs, else {DEFAULT_BATCH_OVERHEAD_S:g})",
    )
    plan.add_argument("--json", action="store_true", help="print the plan and cost as JSON")
    plan.set_defaults(func=_plan)
    for name, (_, summary) in DELEGATED.items():
        commands.add_parser(name, help=f"{summary}; `evalwf {name} --help` for its options", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:  # their own parsers read the rest, --help included
        run, _ = DELEGATED[argv[0]]
        with _program_name(f"evalwf {argv[0]}"):
            return run(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
