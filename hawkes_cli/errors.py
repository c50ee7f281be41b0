"""Error hierarchy: every user mistake is a :class:`HawkesError` with an exit code.

The CLI prints ``error: <message>`` on one line and exits with ``exit_code``; nothing
below the CLI prints or exits.
"""

from __future__ import annotations

from .vocab import EXIT_STOPPED


class HawkesError(Exception):
    """Base class of all errors meant for the user (no traceback shown).

    Parameters
    ----------
    message
        What was wrong, where, and what to do about it.
    """

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(HawkesError):
    """Bad command-line values (unknown or missing parameters, bad options)."""

    exit_code = 2


class EventsError(HawkesError):
    """An events file is missing, unreadable or invalid."""

    exit_code = 3


class ConfigError(HawkesError):
    """A configuration file is invalid."""

    exit_code = 4


class DeviceError(HawkesError):
    """No usable OpenCL device (none found, no float64 support, bad selection)."""

    exit_code = 5


class ParallelError(HawkesError):
    """MPI layout problems (size mismatch, shared devices, missing mpi4py)."""

    exit_code = 6


class StorageError(HawkesError):
    """A chain file or checkpoint is corrupt, foreign, or would be overwritten."""

    exit_code = 7


class Interrupted(HawkesError):
    """A run stopped on request (signal) after committing its draws."""

    exit_code = EXIT_STOPPED
