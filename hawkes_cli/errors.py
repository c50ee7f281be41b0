"""Error hierarchy: every user mistake is a :class:`HawkesError` with an exit code.

The CLI prints ``error: <message>`` on one line and exits with ``exit_code``; nothing
below the CLI prints or exits.
"""

from __future__ import annotations

import re
import sys
from typing import Any

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


class GpuNotUsedError(DeviceError):
    """GPUs were given (Slurm, ``CUDA_VISIBLE_DEVICES``...) but the automatic choice of OpenCL
    device is not a GPU: refused before anything is written, unless ``engine.device`` names
    the CPU (:func:`hawkes_cli.kernels.select_device`)."""

    exit_code = 9


class ParallelError(HawkesError):
    """MPI layout problems (size mismatch, shared devices, missing mpi4py)."""

    exit_code = 6


class StorageError(HawkesError):
    """A chain file or checkpoint is corrupt, foreign, or would be overwritten."""

    exit_code = 7


class OtherRunError(StorageError):
    """A run directory holds a run of a different config (the caller words the way out)."""


class Interrupted(HawkesError):
    """A run stopped on request (signal) after committing its draws."""

    exit_code = EXIT_STOPPED


_HDF5_WRITE_FAILED: list[bool] = [False]


def note_hdf5_write_failure() -> None:
    """Remember that an HDF5 write failed in this process (a full disk, a refused write).

    The HDF5 library then cannot close the file cleanly, and its clean-up at interpreter exit
    can crash (a segmentation fault after the error line). The CLI ends such a process with
    ``os._exit`` once it has printed the error (:func:`hdf5_write_failed`); everything a
    commit made durable was fsynced before. The messages of the objects h5py then fails to
    free are dropped (they repeat the error already reported).
    """
    if _HDF5_WRITE_FAILED[0]:
        return
    _HDF5_WRITE_FAILED[0] = True
    default = sys.unraisablehook

    def quiet(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, RuntimeError):
            default(unraisable)

    sys.unraisablehook = quiet


def hdf5_write_failed() -> bool:
    """Whether :func:`note_hdf5_write_failure` was called in this process."""
    return _HDF5_WRITE_FAILED[0]


def io_cause(exc: BaseException) -> str:
    """The cause of an I/O failure in a few words: the OS's message for an ``OSError`` with an
    errno, the ``error message`` HDF5 puts into the ``RuntimeError`` h5py raises (e.g. "No
    space left on device"), else the first line of the message."""
    text = str(exc)
    m = re.search(r"error message = '([^']+)'", text)
    if m:
        return m.group(1)
    if isinstance(exc, OSError) and exc.errno and exc.strerror:
        return exc.strerror
    return (text.splitlines() or [type(exc).__name__])[0]
