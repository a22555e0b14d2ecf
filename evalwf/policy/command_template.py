"""Check the policy command template before any job runs: a mistake here would otherwise fail every batch on
every worker attempt (a missing {port} leaves the server on its default port until the startup timeout; an
unknown placeholder or a literal brace raises a bare KeyError deep in the worker)."""

from __future__ import annotations

import string

from evalwf.common.errors import ConfigError

# What PolicySpec.render_command fills in: the worker's port for the server, the GPU as seen inside the server
# (index among CUDA_VISIBLE_DEVICES) and its physical id, the workflow's python, how the server batches requests.
PLACEHOLDERS = ("port", "gpu", "gpu_physical", "python", "max_batch", "max_wait_ms")
LITERAL_BRACES = "write a literal brace as {{ or }} (e.g. a JSON argument '{{\"a\": 1}}' or a shell '${{VAR}}')"


def check_command_template(command: str, key: str = "policy.command") -> None:
    """Raise ConfigError naming `key` unless `command` is a valid template that uses {port}."""
    where = f"invalid config: config key '{key}'"
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(command) if field is not None]
    except ValueError as error:
        raise ConfigError(f"{where}: {error} in {command!r}; {LITERAL_BRACES}") from None
    known = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
    for field in fields:
        name = field.split(".", 1)[0].split("[", 1)[0]
        if name not in PLACEHOLDERS:
            shown = "{" + field + "}"
            raise ConfigError(
                f"{where}: unknown placeholder {shown} in {command!r}; the known ones are {known}; {LITERAL_BRACES}"
            )
    if "port" not in fields:
        raise ConfigError(
            f"{where}: {command!r} does not use {{port}}: the worker chooses a free port for each policy server "
            "and waits for it to listen there (add e.g. --port {port})"
        )
