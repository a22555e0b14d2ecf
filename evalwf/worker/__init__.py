"""GPU workers (`evalwf worker`): the claim loop, the run of one task (payload check against the plan, guarded
policy server, warm job steps), reports to the queue, the worker's status file, and the guardian that makes every
child die with its worker.

Imports common, contract, queue, plan, policy, benchmark and job; never report, rules or cli, nor the executor
plugin. Snakemake only in warm_step (a spare job step that has it imported before its batch arrives).
"""
