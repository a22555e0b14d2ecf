"""Helpers every part uses: error types, the type of JSON values, atomic file writes, content hashes, writable
checks, where the package and its shipped folders are, how a printed command names this environment's `evalwf`.

Owns nothing of the evaluation itself. Never imports another part of evalwf, a benchmark, Snakemake or Labtasker:
everything else may import it, simulator interpreters included (Python 3.10, the light core only).
"""
