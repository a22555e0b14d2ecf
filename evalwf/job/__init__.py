"""What runs in a benchmark's own interpreter: the simulator step (`python -m evalwf.job.sim_step`, internal: seal one
manifest, evaluate one batch), the node checks' probe (`python -m evalwf.job.sim_checks`, internal), and how the
workflow's side starts them there and reads their failure's cause.

The light core: Python 3.10 and numpy 1.26 are enough (scripts/light_core.py checks it). Imports common,
contract, policy, benchmark and plan; never worker, report, rules or cli, Snakemake or Labtasker.
"""
