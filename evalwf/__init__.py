"""evalwf: parallel policy evaluation on LIBERO and RoboTwin as a Snakemake workflow routed through Labtasker.

The framework, one folder per part (docs/architecture.md draws them and the data's way through them):

- common/    what every part uses: errors, atomic files, hashing, where the package lives
- contract/  the names the executor plugin and the workers share (payload, queue defaults, resources, routes)
- queue/     the Labtasker server every client reaches: the embedded server, endpoints, TLS, breaker records
- plan/      a config becomes a campaign: tasks, sealed manifests, batches, seeds, cost
- policy/    the policy protocol: spec and identity, client, serving (batched), wire format, template server
- benchmark/ the interface a benchmark implements (benchmarks/<name>/ does) and the mechanics it shares
- job/       what runs in a benchmark's own interpreter: the simulator step and the node checks' probe
- worker/    GPU workers: claim loop, task runs, guarded policy servers and job steps, reports
- report/    validated batches become tables, plots, comparisons and the live status
- rules/     the job bodies the workflow's rules call
- cli/       `evalwf <subcommand>`: everything a user runs

The benchmarks themselves live in the `benchmarks` package (one folder each, registered in benchmarks/registry.py).
tests/layout/test_import_boundaries.py holds every module to the diagram of docs/architecture.md.
"""
