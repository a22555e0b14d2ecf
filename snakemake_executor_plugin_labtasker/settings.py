"""The executor's settings: Snakemake's common settings for this executor and the `--labtasker-*` options (each
also read from its SNAKEMAKE_LABTASKER_* variable), as every executor plugin declares them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from snakemake_interface_executor_plugins.settings import CommonSettings, ExecutorSettingsBase

from evalwf.contract import CLIENT_TOKEN_ENV, CLIENT_URL_ENV, DEFAULT_QUEUE, DEFAULT_ROUTE
from evalwf.queue.breaker import DEFAULT_MAX_FAILURES
from snakemake_executor_plugin_labtasker.scheduling import MODES as SCHEDULING_MODES

common_settings = CommonSettings(
    non_local_exec=True,
    implies_no_shared_fs=False,
    job_deploy_sources=False,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=True,
    pass_envvar_declarations_to_cmd=False,  # would print env values (a token!) into the task payload
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=0,
)


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    url: str | None = field(
        default=None,
        metadata={
            "help": f"Labtasker server URL (http://host:port). Default: ${CLIENT_URL_ENV}, else an embedded server "
            "on a Unix socket started for this workflow directory (workers on this machine find it; only you can "
            f"connect). The token of a URL is read from ${CLIENT_TOKEN_ENV} only.",
            "env_var": True,
            "required": False,
            "type": str,
        },
    )
    queue: str = field(
        default=DEFAULT_QUEUE,
        metadata={
            "help": "Labtasker queue of the campaign's tasks (created if missing).",
            "env_var": True,
            "type": str,
        },
    )
    route: str = field(
        default=DEFAULT_ROUTE,
        metadata={
            "help": "Route of submitted tasks; only workers started with this --route claim them.",
            "env_var": True,
            "type": str,
        },
    )
    scheduling: str = field(
        default="longest-first",
        metadata={
            "help": "Which queued batch workers claim first: longest-first (by each batch's expected seconds, "
            "the figure `evalwf plan` shows; manifests before batches) or fifo (submission order).",
            "env_var": True,
            "type": str,
            "choices": list(SCHEDULING_MODES),
        },
    )
    priority: int = field(
        default=0,
        metadata={"help": "Base task priority (added to the scheduling priority).", "env_var": True, "type": int},
    )
    max_attempts: int = field(
        default=1,
        metadata={
            "help": "Labtasker attempts per submission before the task counts as failed (Snakemake's --retries "
            "then requeues it). Uncharged hand-backs (worker SIGTERM/SIGINT) do not count.",
            "env_var": True,
            "type": int,
        },
    )
    server_root: str | None = field(
        default=None,
        metadata={
            "help": "Root (state + database) of the embedded server; default <workdir>/.labtasker, or a local "
            "per-user directory when the workflow directory is on a network filesystem.",
            "env_var": True,
            "required": False,
            "type": str,
        },
    )
    no_worker_warning_s: int = field(
        default=60,
        metadata={
            "help": "Warn (and repeat the worker command) when no task has been claimed for this many seconds and "
            "no worker is registered on the queue and route (0: never).",
            "env_var": True,
            "type": int,
        },
    )
    policy_breaker: int = field(
        default=DEFAULT_MAX_FAILURES,
        metadata={
            "help": "Stop a policy for this submission once its server failed to start (crash, timeout, failed "
            "handshake) this many times before any start succeeded (all workers together), or its first this many "
            "batches all failed for the same reason: its queued tasks are cancelled, its jobs reported failed "
            "without starting it again, one message names the reason and the log; the other policies go on. Each "
            "new submission tries it again. 0: never stop a policy.",
            "env_var": True,
            "type": int,
        },
    )
    allow_workflow: str | None = field(
        default=None,
        metadata={
            "help": "Directories the workers are started with (--allow-workflow) besides the workflow directory, "
            f"separated by '{os.pathsep}'. Before any task is created, the Snakefile and every config file must be "
            "inside the workflow directory or one of these (and not where jobs, Snakemake or the queue write): "
            "workers refuse a task naming any other.",
            "env_var": True,
            "required": False,
            "type": str,
        },
    )
    cancel_running: bool = field(
        default=False,
        metadata={
            "help": "On Ctrl-C also cancel RUNNING tasks (default: only queued ones; running ones finish and a "
            "rerun re-attaches to them).",
            "env_var": True,
            "type": bool,
        },
    )
