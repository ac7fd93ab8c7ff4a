"""Error hierarchy of recycling_core.

Every error carries a stable ``code`` so that callers (the service, the command line) can map it
to an HTTP status or an exit code without parsing messages.
"""

from __future__ import annotations


class RecyclingError(Exception):
    """Base class of every error raised on purpose by recycling_core."""

    code = "RecyclingError"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class UnsafeFileError(RecyclingError):
    """A file that could execute code when loaded (pickle) or that escapes its directory."""

    code = "UnsafeFile"


class InvalidModelError(RecyclingError):
    """A base model directory that is missing files or cannot be loaded."""

    code = "InvalidModel"


class InvalidAdapterError(RecyclingError):
    """An adapter directory that is malformed (missing config, bad tensors, unknown type)."""

    code = "InvalidAdapter"


class IncompatibleAdapterError(RecyclingError):
    """An adapter that does not fit a base model; ``field`` names the mismatching module or field."""

    code = "IncompatibleAdapter"


class DatasetError(RecyclingError):
    """A task directory whose splits are missing, empty, malformed or carry unknown labels."""

    code = "InvalidDataset"


class ConfigError(RecyclingError):
    """A configuration value outside its allowed range."""

    code = "InvalidConfig"


class JobCancelled(RecyclingError):
    """Raised inside a long run when its cancel hook asks it to stop."""

    code = "Cancelled"
