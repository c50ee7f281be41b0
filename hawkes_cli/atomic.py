"""Atomic file replacement: readers see the old file or the new one, never half of either.

The one temp-file + ``os.replace`` writer of the package. The temporary file lives in the target's
directory (so the rename never crosses a file system), is fsynced before the rename, and is
removed if anything fails; the directory is fsynced after the rename so the new name is durable.

HDF5 files are built in memory first (:func:`hdf5_image`) and their bytes written with plain
writes (:func:`fill`): a full disk is then one ``OSError`` (:class:`NoSpaceError`,
with the bytes the file needs), never a write that fails inside the HDF5 library, after which
h5py cannot free its objects (a traceback per object) and the library's clean-up at exit can
crash the process.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The errno values of a write refused for want of space (a full disk, a quota).
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_IMAGES = itertools.count()


class NoSpaceError(OSError):
    """A write refused for want of space (``ENOSPC``, ``EDQUOT``).

    Attributes
    ----------
    needed
        Bytes the whole file needs.
    """

    def __init__(self, exc: OSError, path: str | Path, needed: int) -> None:
        super().__init__(exc.errno, exc.strerror, str(path))
        self.needed = needed


def room_hint(exc: BaseException) -> str:
    """``"; it needs about 1.2 MB"`` for a :class:`NoSpaceError`, else ``""``: what to add to
    an error message so that the user knows how much to free."""
    if not isinstance(exc, NoSpaceError):
        return ""
    return f"; it needs about {max(exc.needed / 1e6, 0.01):.2g} MB"


def fill(path: str | Path, data: bytes | memoryview) -> None:
    """Write ``data`` into the (new or truncated) file ``path`` with plain writes.

    Raises
    ------
    NoSpaceError
        The disk is full (or a quota reached); what was written stays (the caller's temporary
        file, which :func:`replacing` removes).
    OSError
        Any other refusal.
    """
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise NoSpaceError(exc, path, memoryview(data).nbytes) from None
        raise


def hdf5_image(build: Callable[[Any], None], *, libver: str | None = None) -> bytes:
    """The bytes of the HDF5 file that ``build`` writes into an empty ``h5py.File`` held in
    memory (the ``core`` driver without a backing store): nothing reaches a disk, so nothing
    can fail inside the HDF5 library for want of space (module docstring). Write them with
    :func:`write_bytes` or :func:`fill`.

    Parameters
    ----------
    build
        Called with the open file (its datasets and groups closed when it returns).
    libver
        h5py's ``libver`` (``"latest"`` for files opened for SWMR later).
    """
    import h5py

    name = f"hawkes-image-{os.getpid()}-{next(_IMAGES)}.h5"
    f = h5py.File(name, "w", driver="core", backing_store=False, libver=libver)
    try:
        build(f)
        f.flush()
        return f.id.get_file_image()
    finally:
        f.close()


def shape_problem(path: str | Path, folder: bool) -> str | None:
    """Why ``path`` cannot become a file (``folder`` False) or a folder (True), before any
    work: a file where a folder of its path must be, or a folder where a file must be (and
    the reverse), or None."""
    p = Path(path).expanduser()
    for above in p.parents:
        if above.exists():
            if not above.is_dir():
                return f"{above} is a file, not a folder"
            break
    if folder and p.exists() and not p.is_dir():
        return "it is a file, not a folder"
    if not folder and p.is_dir():
        return "it is a folder, not a file"
    return None


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


class ForeignFilesError(FileExistsError):
    """A folder to be replaced holds files its writer did not make (``names``)."""

    def __init__(self, path: Path, names: list[str]) -> None:
        super().__init__(f"{path} holds files hawkes did not write there: {', '.join(names)}")
        self.path, self.names = path, names


@contextlib.contextmanager
def replacing_folder(path: str | Path, *, owns: Callable[[str], bool]) -> Iterator[Path]:
    """Context manager: write a set of files into the yielded fresh folder, then swap it in.

    The folder is a hidden sibling of ``path``. On a clean exit it replaces ``path`` whole
    (the old folder is renamed aside, then removed), so ``path`` holds one complete set of
    files or, if the process dies between the two renames, none (the previous set then waits
    in ``.NAME.PID.old``); never a mix of two runs. On an exception the new folder is removed
    and ``path`` is untouched.

    Parameters
    ----------
    path
        The output folder (created with its parents if missing).
    owns
        Whether a file name is one this writer makes: an existing ``path`` holding any other
        name is refused before anything is written.

    Raises
    ------
    ForeignFilesError
        ``path`` holds files (or folders) ``owns`` does not claim.
    NotADirectoryError
        ``path`` exists and is not a folder.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} is a file, not a folder")
    if path.is_dir():
        foreign = sorted(p.name for p in path.iterdir() if p.is_dir() or not owns(p.name))
        if foreign:
            raise ForeignFilesError(path, foreign)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    old = path.with_name(f".{path.name}.{os.getpid()}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        fsync_dir(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def write_bytes(path: str | Path, data: bytes | memoryview, *, make_parents: bool = False) -> None:
    """Replace ``path`` by ``data`` atomically (see :func:`replacing`; a full disk raises
    :class:`NoSpaceError`, nothing left behind)."""
    with replacing(path, make_parents=make_parents) as tmp:
        fill(tmp, data)


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
