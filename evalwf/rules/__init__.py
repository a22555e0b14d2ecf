"""What the workflow's rules run (workflow/rules/*.smk call `jobs.<body>`): seal a manifest, evaluate a batch
(in the benchmark's interpreter, against the worker's policy server or one of its own), record the campaign,
summarise a benchmark, compare policies; each with its stderr copied into the job's log.

Glue between Snakemake and the parts: imports job, plan, policy, worker (a local batch's own guarded policy
server), report (the gather steps), common and contract; never cli or the executor plugin. Nothing but the
workflow and the CLI imports it.
"""
