"""Atomic file replacement: readers see the old file or the new one, never half of either.

The one temp-file + ``os.replace`` writer of the package. The temporary file lives in the target's
directory (so the rename never crosses a file system), is fsynced before the rename, and is
removed if anything fails; the directory is fsynced after the rename so the new name is durable.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename or unlink in it is durable (best effort)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync directories
        pass
    finally:
        os.close(fd)


def temporary_path(path: Path) -> Path:
    """The temporary name :func:`replacing` writes before the rename (hidden, per process)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def replacing(path: str | Path, *, make_parents: bool = False) -> Iterator[Path]:
    """Context manager: write the new content to the yielded temporary path, then replace.

    On a clean exit the temporary file is fsynced and renamed over ``path``; on any exception it
    is removed and ``path`` is untouched. Use it for writers that need a file name (HDF5, CSV
    writers of other libraries); :func:`write_text` and :func:`write_json` cover text.

    Parameters
    ----------
    path
        The file to replace (created if missing).
    make_parents
        Create missing parent directories first.
    """
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def write_bytes(path: str | Path, data: bytes, *, make_parents: bool = False) -> None:
    """Replace ``path`` by ``data`` atomically (see :func:`replacing`)."""
    with replacing(path, make_parents=make_parents) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str, *, make_parents: bool = False) -> None:
    """Replace ``path`` by ``text`` (UTF-8) atomically (see :func:`replacing`)."""
    write_bytes(path, text.encode("utf-8"), make_parents=make_parents)


def write_json(
    path: str | Path, obj: Any, *, indent: int | None = 1, make_parents: bool = False
) -> None:
    """Replace ``path`` by the JSON of ``obj`` (plus a newline) atomically.

    The object is serialised before anything is written, so a value JSON cannot hold fails
    with ``path`` untouched.
    """
    text = json.dumps(obj, indent=indent) + "\n"
    write_text(path, text, make_parents=make_parents)
