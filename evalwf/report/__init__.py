"""Validated batch results become what a lab reads: task and suite tables (CSV, Markdown, LaTeX, HTML), plots,
the failed-episode gallery, Wilson and Newcombe intervals, the reference and policy comparisons, and the live
status of a run.

Imports common, contract, queue (status reads the queue), policy, benchmark and plan (the result format); never
job, worker, rules or cli, Snakemake or the executor plugin.
"""
