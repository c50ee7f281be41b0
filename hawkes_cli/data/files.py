"""Loading and saving events files, whichever the format: the paths, the atomic write."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import atomic
from ..errors import EventsError, UsageError, io_cause
from .csv_file import load_csv, open_text, write_csv
from .events import EventData
from .formats import PathLike, file_kind, is_gz, suffix_text
from .hdf5_file import load_hdf5, write_hdf5

log = logging.getLogger(__name__)


def load_events(path: PathLike, *, need_density: bool = False) -> EventData:
    """Read, validate and sort an events file (CSV or HDF5).

    Parameters
    ----------
    path
        ``.csv`` / ``.csv.gz`` (header row; columns ``time``, ``x``, ``y``, optional ``density``
        and ``fips``; other columns ignored; names are case-insensitive) or ``.h5`` / ``.hdf5`` /
        ``.he5`` (group ``/events`` with 1-D datasets of those names; its attributes become
        :attr:`EventData.attrs`, JSON strings decoded back to dicts/lists).
    need_density
        If true (model 2), the ``density`` column is required and every value must be a finite
        number > 0. If false, a valid ``density`` column is loaded when present; an invalid one
        is skipped with a WARNING.

    Returns
    -------
    EventData
        N >= 2 events sorted by time (stable); ``fips`` zero-padded to 5 characters.

    Raises
    ------
    EventsError
        Missing/unreadable file, unknown suffix, not HDF5, no ``/events`` group, a missing column,
        a non-number, NaN/inf, negative time, bad density (when needed), bad FIPS code, columns of
        unequal length, fewer than 2 events. The message names the file, the column and the first
        bad row (CSV: 1-based line number in the file; HDF5: 0-based index).
    """
    p = _user_path(path)
    kind = file_kind(p)
    if not kind:
        raise EventsError(
            f"{p}: unknown events file type {''.join(p.suffixes) or '(no suffix)'!r}; "
            f"accepted suffixes are {suffix_text()}"
        )
    try:
        os.stat(p)
    except FileNotFoundError:
        start = (
            ""
            if Path(path).expanduser().is_absolute()
            else (f" (relative paths start at {Path.cwd()})")
        )
        raise EventsError(f"{p}: file not found; check the path{start}") from None
    except OSError as exc:  # a name or path too long, a loop of links, no permission
        raise EventsError(
            f"{p}: cannot use this path ({exc.strerror or exc}); check the path"
        ) from None
    if p.is_dir():
        raise EventsError(f"{p}: is a directory, not an events file")
    data = load_csv(p, need_density) if kind == "csv" else load_hdf5(p, need_density)
    log.info("loaded %d events from %s", data.n, p)
    return data


def _user_path(path: PathLike) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; an unknown user is an error."""
    p = Path(path)
    if str(p).startswith("~"):
        try:
            p = p.expanduser()
        except RuntimeError:
            raise EventsError(
                f"{p}: cannot expand {str(p).split(os.sep)[0]!r} (no such user, or no home "
                f"directory); write the path out in full"
            ) from None
    return p


def _create_empty(tmp: Path, path: Path) -> None:
    """Create the temporary file first, so a missing or read-only folder gets its own message.

    Mode 0o666 so the umask applies as for a normal file.
    """
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
    except OSError as exc:
        raise EventsError(
            f"{path}: cannot write the events file ({exc.strerror or exc}); check that the folder "
            f"{path.parent} exists and is writable"
        ) from None


def save_events(
    data: EventData, path: PathLike, *, finish: Callable[[Any], None] | None = None
) -> None:
    """Write events to CSV or HDF5 atomically (temporary file in the same folder + rename).

    Parameters
    ----------
    data
        The events to write.
    path
        Target file; the suffix picks the format (see :data:`~hawkes_cli.data.SUFFIXES`). CSV
        gets the header ``time,x,y[,density][,fips]`` and every float with full precision
        (``repr``, which reads back to the same float64); CSV cannot keep ``attrs`` (an INFO
        message says so). HDF5 gets the datasets under ``/events`` and ``attrs`` as attributes
        of that group, dicts, lists and tuples as JSON strings (``None`` values are left out).
    finish
        HDF5 only: called with the file being built (an ``h5py.File`` in memory) once the
        events are in it, to add groups of the caller's own; whatever it raises leaves
        ``path`` untouched.

    Raises
    ------
    UsageError
        Unknown suffix, or an attribute value HDF5 cannot store.
    EventsError
        The file cannot be written (folder missing, no permission, disk full). No partial file is
        left behind; an existing file at ``path`` stays as it was.
    """
    p = Path(path)
    kind = file_kind(p)
    if not kind:
        raise UsageError(
            f"{p}: cannot tell the events file type from {''.join(p.suffixes) or '(no suffix)'!r}; "
            f"use one of {suffix_text()}"
        )
    if kind == "csv" and len(data.attrs):
        log.info(
            "%s: CSV cannot keep the attributes %s; save as .h5 to keep them",
            p,
            ", ".join(sorted(data.attrs)),
        )
    try:
        with atomic.replacing(p) as tmp:
            _create_empty(tmp, p)
            if kind == "csv":
                with open_text(tmp, "w", gz=is_gz(p)) as handle:
                    write_csv(data, handle)
            else:
                write_hdf5(data, tmp, finish)
    except (OSError, RuntimeError) as exc:  # h5py raises RuntimeError for failed writes too
        raise EventsError(
            f"{p}: writing the events file failed ({io_cause(exc)}{atomic.room_hint(exc)}); "
            f"nothing was written — check free space and permissions"
        ) from exc
    log.info("wrote %d events to %s", data.n, p)
