"""Errors that carry a message a user can act on."""


class ConfigError(ValueError):
    """The suite configuration is invalid; the message names the key and how to fix it."""


class ResultValidationError(ValueError):
    """A batch result file fails validation; the message names the file and what is wrong."""


class ManifestError(ValueError):
    """A manifest is missing, corrupt, or does not match what the batch expects."""


class EnvironmentUnavailable(RuntimeError):
    """What of a benchmark's environment defines its episodes (its interpreter's versions, its checkout) cannot be
    read on this host; the message names the config key and the fix."""


class SimulatorEnvError(RuntimeError):
    """The benchmark's interpreter is missing, or its job step failed there (`cause`: the error it failed with
    there, `Type: text`, which the job reports as its own: evalwf.contract.failure)."""

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause
