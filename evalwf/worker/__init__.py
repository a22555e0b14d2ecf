"""GPU workers (`evalwf worker`): the claim loop (gpu_worker), the run of one task (task_run: payload check against
the plan, guarded policy server, job steps from warm spares forked from one fork server: job_steps, warm_step,
fork_server), reports to the queue (reporting),
the worker's status file (status_file), and the guardian that makes every child die with its worker.

Imports common, contract, queue, plan, policy, benchmark and job; never report, rules or cli, nor the executor
plugin. Snakemake only in warm_step (a spare job step that has it imported before its batch arrives).
"""
