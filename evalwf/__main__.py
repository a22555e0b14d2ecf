"""`python -m evalwf` is `evalwf`: for where the console script is not on PATH (a job, a Slurm template)."""

from evalwf.cli.main import main

raise SystemExit(main())
