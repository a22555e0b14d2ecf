"""The executor's own error: what is wrong and the fix, printed by its message alone."""

from __future__ import annotations

from snakemake_interface_common.exceptions import WorkflowError as SnakemakeWorkflowError

from evalwf.common.errors import CauseOnly


class WorkflowError(CauseOnly, SnakemakeWorkflowError):
    """The executor's own errors (each names what is wrong and the fix): Snakemake's WorkflowError, printed by its
    message alone instead of followed by the plugin's frames."""
