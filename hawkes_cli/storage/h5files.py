"""Opening, syncing and closing chain files with h5py: SWMR readers that give up on damaged
metadata, the fsync of a flushed file, and the files left open after a failed write."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py

from ..errors import StorageError, io_cause, note_hdf5_write_failure

logger = logging.getLogger(__name__)

METADATA_READ_ATTEMPTS = 16
"""Reads of a metadata block a SWMR reader tries before it gives up on a bad checksum (HDF5's
default, 100 with exponential back-off, makes a damaged file hang a reader for an hour; 16 take
about 0.1 s, plenty for a writer's torn update)."""


def fsync_h5(h5file: h5py.File) -> None:
    """fsync the file behind an open HDF5 handle (after ``flush``), when the driver has an fd."""
    try:
        fd = h5file.id.get_vfd_handle()
    except Exception:  # pragma: no cover - drivers without a POSIX fd
        return
    if isinstance(fd, int) and fd >= 0:
        os.fsync(fd)


def h5_kwargs() -> dict[str, Any]:
    """File-locking mode: HDF5's own locks where the file system supports them."""
    v = h5py.version.hdf5_version_tuple
    if v >= (1, 12, 1) or (1, 10, 7) <= v < (1, 11):
        return {"locking": "best-effort"}
    return {}  # pragma: no cover - old HDF5


#: HDF5 files left open after a failed write (see :func:`close_quietly`).
_UNCLOSABLE: list[Any] = []


def close_quietly(h5file: h5py.File, path: Path, *, failed: bool) -> None:
    """Close an HDF5 file whose writes may have failed (a full disk).

    After a failed write to it (``failed``) the file is not closed at all: HDF5 would try to
    flush it again and h5py print a traceback per object it cannot free. It is kept open
    until the process ends (the CLI then exits with ``os._exit``,
    :func:`~hawkes_cli.errors.note_hdf5_write_failure`); what a commit made durable was
    fsynced before. A failure of the close itself is logged, never raised over the error that
    led here.
    """
    if not failed:
        try:
            h5file.close()
            return
        except (OSError, RuntimeError) as exc:
            note_hdf5_write_failure()
            logger.warning("could not close %s (%s)", path, io_cause(exc))
    keep_open(h5file)
    logger.debug("left %s open after a failed write; its committed draws are intact", path)


def keep_open(obj: Any) -> None:
    """Keep an h5py object (a file, datasets) referenced until the process ends, so that it
    is never freed: freeing it after a failed write would make HDF5 flush it again."""
    _UNCLOSABLE.append(obj)


#: What a user can do about a damaged chain file (the messages of every command that reads one:
#: ``hawkes-run`` resuming, ``hawkes-diagnose``, ``hawkes-run status``).
WAY_OUT = (
    "restore it from a copy, or start the run afresh with `hawkes-run local --overwrite` (or "
    "`hawkes-run chain --overwrite`), which discards its chain files"
)


@contextlib.contextmanager
def h5_errors(path: Path) -> Iterator[None]:
    """Turn the errors h5py raises on a damaged file into a :class:`StorageError`."""
    try:
        yield
    except StorageError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise StorageError(
            f"chain file {path} is corrupt or unreadable ({exc}); {WAY_OUT}"
        ) from exc


def open_reader(path: Path) -> h5py.File:
    """Open a chain file read-only with SWMR (works on live, cleanly closed and killed files)."""
    if path.is_dir():
        raise StorageError(f"{path} is a directory, not a chain file")
    try:
        is_h5 = h5py.is_hdf5(path)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if not is_h5:
        raise StorageError(
            f"{path} exists but is not an HDF5 file (damaged, or not written by hawkes); {WAY_OUT}"
        )
    try:  # a cleanly closed file: HDF5 checks its size and checksums, and fails at once
        return h5py.File(path, "r", libver="latest", **h5_kwargs())
    except OSError as exc:
        if "already open for write" not in str(exc):
            raise StorageError(
                f"chain file {path} is corrupt or unreadable ({exc}); {WAY_OUT}"
            ) from exc
    # open for writing: a live writer, or one that was killed (SWMR flags left set)
    _check_stored_eof(path)
    try:
        return _open_swmr(path)
    except OSError as exc:
        raise StorageError(
            f"chain file {path} is corrupt or unreadable ({exc}); {WAY_OUT}"
        ) from exc


def _stored_eof(path: Path) -> int | None:
    """The end-of-file address in the superblock (versions 2 and 3, which libver "latest"
    writes), or None for another superblock."""
    with open(path, "rb") as fh:
        head = fh.read(48)
    if len(head) < 48 or head[:8] != b"\x89HDF\r\n\x1a\n" or head[8] not in (2, 3):
        return None
    size_of_offsets = head[9]
    if size_of_offsets != 8:
        return None
    return int.from_bytes(head[28:36], "little")


def _check_stored_eof(path: Path, tries: int = 5) -> None:
    """Refuse a file shorter than its superblock says (a SWMR reader skips HDF5's own check).

    A live writer may extend the file just after it updated the superblock: look again a few
    times before calling it truncated.
    """
    for attempt in range(tries):
        try:
            eof, size = _stored_eof(path), path.stat().st_size
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        if eof is None or size >= eof:
            return
        if attempt + 1 < tries:
            time.sleep(0.1)
    raise StorageError(
        f"chain file {path} is truncated ({size} bytes, its superblock says {eof}); {WAY_OUT}"
    )


@functools.lru_cache(maxsize=1)
def _set_read_attempts() -> Callable[[int, int], int] | None:
    """HDF5's ``H5Pset_metadata_read_attempts`` from the library h5py loaded (Linux), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            libs = {line.split()[-1] for line in fh if "libhdf5" in line}
        path = next(
            p for p in sorted(libs) if p.startswith("/") and "hdf5_hl" not in os.path.basename(p)
        )
        func = ctypes.CDLL(path).H5Pset_metadata_read_attempts
    except (OSError, StopIteration, AttributeError):  # pragma: no cover - not Linux
        return None
    func.argtypes = [ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def _open_swmr(path: Path) -> h5py.File:
    """Open read-only with SWMR, giving up after :data:`METADATA_READ_ATTEMPTS` bad reads."""
    setter = _set_read_attempts()
    if setter is None:  # pragma: no cover - not Linux: HDF5's default attempts
        return h5py.File(path, "r", libver="latest", swmr=True, **h5_kwargs())
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    if h5_kwargs() and hasattr(fapl, "set_file_locking"):
        fapl.set_file_locking(True, ignore_when_disabled=True)
    if setter(fapl.id, METADATA_READ_ATTEMPTS) < 0:  # pragma: no cover
        return h5py.File(path, "r", libver="latest", swmr=True, **h5_kwargs())
    flags = h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ
    return h5py.File(h5py.h5f.open(os.fsencode(path), flags, fapl=fapl))
