"""The interface a benchmark implements (benchmarks/<name>/adapter.py: BenchmarkAdapter, with TaskRef, ManifestBody,
BatchContext, SampleObservation; benchmarks/<name>/settings.py: its BenchmarkSettings) and the mechanics every
benchmark shares: episode ranges, deterministic seeds and isolated generators, the closed-loop rollout and its
episode records, rollout videos, node checks.

A new benchmark reads this part and nothing else (docs/adding-a-benchmark.md). Adapters are found through the
registry (benchmarks/registry.py, get_adapter). Runs in simulator interpreters (the light core). Imports
evalwf.common, evalwf.contract and evalwf.policy only; never plan, job, worker, report, rules or cli, Snakemake or
Labtasker.
"""
