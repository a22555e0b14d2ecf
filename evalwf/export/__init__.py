"""A finished run's results where labs keep them: one experiment-tracker run per (policy, benchmark) in MLflow or
Weights & Biases (offline), with the config, manifest hashes, protocol and environment as parameters, success
rates and Wilson bounds per suite and task as metrics, and the summary tables, plot and report as artifacts.
Re-exporting finds the same tracker runs again (ids derived from the run and the policy identity).

Imports report and what lies below it (plan, the result format); the trackers only lazily, as optional extras.
Never worker, rules or cli, Snakemake or the executor plugin.
"""
