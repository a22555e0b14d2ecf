"""The policy protocol: a policy block's schema, spec and identity, the openpi websocket client every batch uses,
the server side shared by the servers this project ships (batched serving), the msgpack-numpy wire format, the
command template, the episode key of every request, and the template server (`evalwf serve`).

Runs in simulator interpreters (the light core). Imports evalwf.common and evalwf.contract only; never plan,
benchmark, job, worker, report or cli, Snakemake or Labtasker.
"""
