"""Chain files: append-only HDF5 draws with an atomic JSON sidecar as the commit record.

Layout (DESIGN section 4)::

    RUN_DIR/chains/chain-00.h5          draws (HDF5, SWMR, written only by the chain's rank 0)
    RUN_DIR/chains/chain-00.ckpt.json   sidecar: the authoritative commit record + checkpoint
    RUN_DIR/chains/chain-00.lock        advisory lock held by the one live writer

The HDF5 file holds the root attributes of :class:`ChainMeta` and a group ``/draws`` with one
resizable, chunked 1-D dataset per parameter (float64, natural scale) and per extra field; one
row per saved draw, warm-up draws included and marked by the ``warmup`` field.

Crash safety
------------
A *commit* is: append the buffered rows to every dataset, flush and fsync the HDF5 file, then
replace the sidecar atomically (temporary file in the same directory, fsync, ``os.replace``,
fsync of the directory). The sidecar's ``draws`` is the number of committed rows; rows beyond it
are garbage from an interrupted commit and are never read. The HDF5 file is always in SWMR-write
mode while it is visible under its name, so after a SIGKILL it can still be opened by a SWMR
reader (a plain open fails on the consistency flags HDF5 leaves set). Resuming therefore never
repairs a file in place: it reads the committed prefix through a SWMR reader and writes a fresh
file next to it (temporary name, fsync, ``os.replace``), which truncates ``/draws`` back to the
sidecar's count and clears the crash state in one atomic step. A crash at any point leaves either
the old file or the new one, each consistent with the sidecar.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from . import __version__, atomic
from .errors import StorageError, io_cause, note_hdf5_write_failure

try:  # POSIX only; without it the writer runs unlocked (with a warning)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CHUNK_ROWS",
    "DRAW_FIELDS",
    "SCHEMA_VERSION",
    "SIDECAR_SCHEMA",
    "ChainDraws",
    "ChainMeta",
    "ChainWriter",
    "lock_path",
    "read_chain",
    "read_sidecar",
    "sidecar_path",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Version of the chain-file and sidecar layout; bumped on incompatible changes."""

#: The chain file's per-draw datasets besides the parameters (name, numpy dtype): the schema
#: every writer (the runner) and reader (diagnostics, tests) imports from here.
#: What each iteration proposed and cost: ``pair_passes`` (pair passes, background and
#: trigger, rank 0's likelihood ran in the iteration, a location redraw included),
#: ``n_proposals`` and ``n_accepted`` (log-density calls and accepted moves), ``jump`` (the
#: tiered sampler's mode jump: -1 not proposed, 0 rejected, 1 accepted). A reader takes a file's
#: own field list (files written before these fields stay readable); a writer resumes only a
#: file with exactly these.
DRAW_FIELDS: tuple[tuple[str, str], ...] = (
    ("iteration", "i8"),
    ("loglik", "f8"),
    ("logprior", "f8"),
    ("accepted", "i1"),
    ("warmup", "i1"),
    ("coordinate", "i1"),
    ("scale", "f8"),
    ("pair_passes", "i4"),
    ("n_proposals", "i2"),
    ("n_accepted", "i2"),
    ("jump", "i1"),
)

SIDECAR_SCHEMA = 2
"""Version of the sidecar (commit record). Schema 2 adds its integrity members:
``record_sha256`` (sha256 of the record's own canonical JSON), and the fingerprint of the
committed draws, ``draws_sha256`` (sha256 of rows ``0 .. draws-1``, row-major, little-endian, in
:attr:`ChainMeta.columns` order) and ``last_iteration``. Schema 1 records (no integrity) are
still read and resumed, with a warning."""

METADATA_READ_ATTEMPTS = 16
"""Reads of a metadata block a SWMR reader tries before it gives up on a bad checksum (HDF5's
default, 100 with exponential back-off, makes a damaged file hang a reader for an hour; 16 take
about 0.1 s, plenty for a writer's torn update)."""

CHUNK_ROWS = 1024
"""Rows per HDF5 chunk of every ``/draws`` dataset."""

FORMAT_NAME = "hawkes-chain"
"""Value of the root attribute ``format`` that marks a file as a chain file."""

_REQUIRED_ATTRS = ("schema_version", "chain_id", "config_sha256", "param_names", "fields")
_INT_ATTRS = ("chain_id", "seed", "model", "n_events", "iterations", "warmup", "thin")
_STR_ATTRS = ("config_yaml", "config_sha256", "kernel_sha256", "package_version")
_NO_LOCK_ERRNOS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


# --------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class ChainMeta:
    """Identity and provenance of one chain, stored as root attributes of its file.

    Parameters
    ----------
    chain_id
        0-based chain index within the run.
    seed
        Sampler seed from the config (the chain's RNG also depends on ``chain_id``).
    model
        Model kind (1 or 2).
    n_events
        Number of events N the likelihood is evaluated on.
    iterations, warmup, thin
        Sampler settings; ``iterations`` counts warm-up too.
    config_yaml, config_sha256
        The resolved config text and its sha256 (hex); a resume with another config is refused.
    kernel_sha256
        sha256 (hex) of the kernel sources used to evaluate the likelihood.
    param_names
        The model parameters, each stored as ``/draws/<name>`` (float64, natural scale).
    fields
        Extra per-draw datasets as ``(name, numpy dtype string)`` pairs, e.g.
        ``(("iteration", "i8"), ("loglik", "f8"), ("warmup", "i1"))``.
    package_version
        Version of the package that wrote the file.
    events_sha256
        :meth:`~hawkes_cli.data.EventData.digest` of the events the chain runs on ("" when
        unknown: files of earlier versions); a resume on other events is refused.
    """

    chain_id: int
    seed: int
    model: int
    n_events: int
    iterations: int
    warmup: int
    thin: int
    config_yaml: str
    config_sha256: str
    kernel_sha256: str
    param_names: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]
    package_version: str = __version__
    events_sha256: str = ""

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.param_names)
        fields = tuple((str(n), str(d)) for n, d in self.fields)
        object.__setattr__(self, "param_names", names)
        object.__setattr__(self, "fields", fields)
        if not names:
            raise ValueError("ChainMeta.param_names must not be empty")
        all_names = names + tuple(n for n, _ in fields)
        for name in all_names:
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"invalid dataset name {name!r} in ChainMeta")
        duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate dataset name(s) in ChainMeta: {', '.join(duplicates)}")
        for name, dtype in fields:
            try:
                kind = np.dtype(dtype).kind
            except TypeError as exc:
                raise ValueError(f"field {name!r}: invalid numpy dtype {dtype!r}") from exc
            if kind not in "biuf":
                raise ValueError(f"field {name!r}: dtype {dtype!r} is not numeric")
        if self.chain_id < 0:
            raise ValueError(f"chain_id must be >= 0, got {self.chain_id}")

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """All ``/draws`` datasets in file order: the parameters (``f8``), then the fields."""
        return tuple((n, "f8") for n in self.param_names) + self.fields

    def to_attrs(self) -> dict[str, Any]:
        """Root attributes as written to the file (lists stored as JSON strings)."""
        attrs: dict[str, Any] = {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION}
        for key in _INT_ATTRS:
            attrs[key] = int(getattr(self, key))
        for key in _STR_ATTRS:
            attrs[key] = str(getattr(self, key))
        if self.events_sha256:
            attrs["events_sha256"] = self.events_sha256
        attrs["param_names"] = json.dumps(list(self.param_names))
        attrs["fields"] = json.dumps([list(f) for f in self.fields])
        return attrs

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> ChainMeta:
        """Rebuild the metadata from decoded root attributes (see :attr:`ChainDraws.attrs`)."""
        kwargs: dict[str, Any] = {key: int(attrs[key]) for key in _INT_ATTRS}
        kwargs.update({key: str(attrs[key]) for key in _STR_ATTRS})
        kwargs["events_sha256"] = str(attrs.get("events_sha256", ""))
        kwargs["param_names"] = tuple(attrs["param_names"])
        kwargs["fields"] = tuple(tuple(f) for f in attrs["fields"])
        return cls(**kwargs)


@dataclass(frozen=True)
class ChainDraws:
    """The committed content of one chain file (see :func:`read_chain`).

    Attributes
    ----------
    path
        The chain file.
    attrs
        Root attributes, decoded to Python values; ``param_names`` is a tuple of str and
        ``fields`` a tuple of ``(name, dtype)`` pairs.
    draws
        One array of shape ``(n_committed,)`` per ``/draws`` dataset, parameters on the natural
        scale, warm-up draws included (see the ``warmup`` field).
    n_committed
        Number of committed draws (from the sidecar; 0 without one).
    committed_at
        ISO 8601 UTC time of the last commit, or None.
    checkpoint
        The payload of the last commit, or None.
    last_iteration
        The iteration of the last committed row as the commit recorded it (None: no rows, or a
        schema-1 record).
    """

    path: Path
    attrs: dict[str, Any]
    draws: dict[str, np.ndarray]
    n_committed: int
    committed_at: str | None
    checkpoint: dict[str, Any] | None
    last_iteration: int | None = None


# --------------------------------------------------------------------------- paths


def sidecar_path(chain_path: Path) -> Path:
    """Sidecar checkpoint of a chain file: ``chain-00.h5`` -> ``chain-00.ckpt.json``."""
    return Path(chain_path).with_suffix(".ckpt.json")


def lock_path(chain_path: Path) -> Path:
    """Advisory lock file of a chain file: ``chain-00.h5`` -> ``chain-00.lock``."""
    return Path(chain_path).with_suffix(".lock")


# --------------------------------------------------------------------------- low-level I/O


def _fsync_h5(h5file: h5py.File) -> None:
    """fsync the file behind an open HDF5 handle (after ``flush``), when the driver has an fd."""
    try:
        fd = h5file.id.get_vfd_handle()
    except Exception:  # pragma: no cover - drivers without a POSIX fd
        return
    if isinstance(fd, int) and fd >= 0:
        os.fsync(fd)


def _h5_kwargs() -> dict[str, Any]:
    """File-locking mode: HDF5's own locks where the file system supports them."""
    v = h5py.version.hdf5_version_tuple
    if v >= (1, 12, 1) or (1, 10, 7) <= v < (1, 11):
        return {"locking": "best-effort"}
    return {}  # pragma: no cover - old HDF5


class _WriterLock:
    """Exclusive advisory ``flock`` on ``chain-NN.lock``, so one process writes a chain.

    Released by :meth:`release` or by the kernel when the process dies (also on SIGKILL).
    Where the file system has no ``flock`` the writer runs unlocked, with a warning.
    """

    def __init__(self, chain_path: Path) -> None:
        self.path = lock_path(chain_path)
        self._fd: int | None = None
        if fcntl is None:  # pragma: no cover - Windows
            logger.warning("no fcntl: chain %s is written without a lock", chain_path)
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create lock file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise StorageError(
                f"chain file {chain_path} is being written by another process ({holder}, "
                f"lock {self.path}); stop that process or wait for it to finish"
            ) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno not in _NO_LOCK_ERRNOS:
                raise StorageError(f"cannot lock {self.path}: {exc}") from exc
            logger.warning(
                "file system does not support flock; chain %s is written without a lock",
                chain_path,
            )
            return
        self._fd = fd
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def writer_holder(chain_path: Path) -> str | None:
    """Who holds the writer lock of a chain file (``"pid 123 on host"``), None when nobody does
    (no lock file, or a file system without ``flock``)."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(lock_path(chain_path), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 200).decode("utf-8", "replace").strip() or "a process"
    except OSError:
        return None
    finally:
        os.close(fd)  # also releases a lock taken here
    return None


# --------------------------------------------------------------------------- reading


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_list(path: Path, key: str, value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise StorageError(f"{path}: root attribute {key!r} is not valid JSON") from exc
    if not isinstance(value, list):
        raise StorageError(f"{path}: root attribute {key!r} is not a list")
    return value


def _record_digest(record: Mapping[str, Any]) -> str:
    """sha256 (hex) of a commit record's canonical JSON, without ``record_sha256`` itself."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _rows_bytes(
    columns: tuple[tuple[str, str], ...], rows: Mapping[str, np.ndarray], lo: int, hi: int
) -> bytes:
    """Rows ``lo .. hi-1`` as row-major little-endian records (the draws fingerprint's input)."""
    dtype = np.dtype([(name, np.dtype(d).newbyteorder("<")) for name, d in columns])
    out = np.empty(max(hi - lo, 0), dtype=dtype)
    for name, _ in columns:
        out[name] = np.asarray(rows[name])[lo:hi]
    return out.tobytes()


def _check_fingerprint(
    side: Mapping[str, Any],
    columns: tuple[tuple[str, str], ...],
    rows: Mapping[str, np.ndarray],
    path: Path,
) -> None:
    """Refuse committed rows that differ from the commit record's fingerprint."""
    if side.get("draws_sha256") is None:  # schema 1: no fingerprint
        return
    n = side["draws"]
    problem = None
    if hashlib.sha256(_rows_bytes(columns, rows, 0, n)).hexdigest() != side["draws_sha256"]:
        problem = "their sha256 differs from the one recorded at the commit"
    elif "iteration" in rows and n and int(rows["iteration"][n - 1]) != side["last_iteration"]:
        problem = (
            f"the last committed row is iteration {int(rows['iteration'][n - 1])}, the commit "
            f"recorded {side['last_iteration']}"
        )
    if problem:
        raise StorageError(
            f"the {n} committed draws of {path} do not match their commit record "
            f"{sidecar_path(path)} ({problem}): the file or its checkpoint was changed after the "
            "commit; restore both from a backup, or start over with --overwrite"
        )


def read_sidecar(chain_path: Path) -> dict[str, Any] | None:
    """Read the sidecar checkpoint of a chain file.

    Parameters
    ----------
    chain_path
        The chain file (``chain-00.h5``), not the sidecar itself.

    Returns
    -------
    dict or None
        ``{"schema", "chain_id", "config_sha256", "draws", "committed_at", "checkpoint"}``, or
        None when there is no sidecar (nothing committed yet).

    Raises
    ------
    StorageError
        The sidecar is unreadable, not JSON, or not of this schema.
    """
    side = sidecar_path(chain_path)
    try:
        text = side.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read checkpoint {side}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(
            f"checkpoint {side} is not valid JSON ({exc}); it was not written by hawkes "
            "(hawkes replaces it atomically); restore it or start over with --overwrite"
        ) from exc
    if not isinstance(data, dict):
        raise StorageError(f"checkpoint {side} is not a JSON object")
    schema = data.get("schema")
    if schema not in (1, SIDECAR_SCHEMA) or isinstance(schema, bool):
        raise StorageError(
            f"checkpoint {side} has schema {schema!r}, this version of hawkes reads schema "
            f"{SIDECAR_SCHEMA} (and 1)"
        )
    if schema == SIDECAR_SCHEMA:
        _check_record_integrity(data, side)
    else:
        logger.warning("checkpoint %s has schema 1: no checksum to verify it against", side)
        data["draws_sha256"] = data["last_iteration"] = None
    draws = data.get("draws")
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 0:
        raise StorageError(f"checkpoint {side}: 'draws' must be an integer >= 0, got {draws!r}")
    for key in ("chain_id", "config_sha256"):
        if key not in data:
            raise StorageError(f"checkpoint {side} lacks {key!r}")
    checkpoint = data.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise StorageError(f"checkpoint {side}: 'checkpoint' must be a JSON object")
    return data


def _check_record_integrity(data: Mapping[str, Any], side: Path) -> None:
    """A schema-2 record must carry its own checksum and the draws' fingerprint."""
    if data.get("record_sha256") != _record_digest(data):
        raise StorageError(
            f"checkpoint {side} fails its checksum (record_sha256): it was edited or damaged "
            "after hawkes wrote it; restore it from a backup, or start over with --overwrite"
        )
    last = data.get("last_iteration")
    if (
        not isinstance(data.get("draws_sha256"), str)
        or "last_iteration" not in data
        or not (last is None or (isinstance(last, int) and not isinstance(last, bool)))
    ):
        raise StorageError(f"checkpoint {side}: its draws fingerprint is malformed")


#: HDF5 files left open after a failed write (see :func:`_close_quietly`).
_UNCLOSABLE: list[Any] = []


def _close_quietly(h5file: h5py.File, path: Path, *, failed: bool) -> None:
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
    _UNCLOSABLE.append(h5file)
    logger.debug("left %s open after a failed write; its committed draws are intact", path)


@contextlib.contextmanager
def _h5_errors(path: Path) -> Iterator[None]:
    """Turn the errors h5py raises on a damaged file into a :class:`StorageError`."""
    try:
        yield
    except StorageError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise StorageError(
            f"chain file {path} is corrupt or unreadable ({exc}); restore it, choose another "
            "run_dir or pass --overwrite"
        ) from exc


def _open_reader(path: Path) -> h5py.File:
    """Open a chain file read-only with SWMR (works on live, cleanly closed and killed files)."""
    if path.is_dir():
        raise StorageError(f"{path} is a directory, not a chain file")
    try:
        is_h5 = h5py.is_hdf5(path)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if not is_h5:
        raise StorageError(
            f"{path} exists but is not an HDF5 file; refusing to touch it: "
            "choose another run_dir or pass --overwrite"
        )
    try:  # a cleanly closed file: HDF5 checks its size and checksums, and fails at once
        return h5py.File(path, "r", libver="latest", **_h5_kwargs())
    except OSError as exc:
        if "already open for write" not in str(exc):
            raise StorageError(
                f"chain file {path} is corrupt or unreadable ({exc}); restore it, choose "
                "another run_dir or pass --overwrite"
            ) from exc
    # open for writing: a live writer, or one that was killed (SWMR flags left set)
    _check_stored_eof(path)
    try:
        return _open_swmr(path)
    except OSError as exc:
        raise StorageError(
            f"chain file {path} is corrupt or unreadable ({exc}); restore it, choose another "
            "run_dir or pass --overwrite"
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
        f"chain file {path} is truncated ({size} bytes, its superblock says {eof}); restore it, "
        "choose another run_dir or pass --overwrite"
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
        return h5py.File(path, "r", libver="latest", swmr=True, **_h5_kwargs())
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    if _h5_kwargs() and hasattr(fapl, "set_file_locking"):
        fapl.set_file_locking(True, ignore_when_disabled=True)
    if setter(fapl.id, METADATA_READ_ATTEMPTS) < 0:  # pragma: no cover
        return h5py.File(path, "r", libver="latest", swmr=True, **_h5_kwargs())
    flags = h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ
    return h5py.File(h5py.h5f.open(os.fsencode(path), flags, fapl=fapl))


def _check_chain_file(h5file: h5py.File, path: Path) -> dict[str, Any]:
    """Decoded root attributes of an open chain file; StorageError when foreign."""
    raw = dict(h5file.attrs)
    missing = [k for k in _REQUIRED_ATTRS if k not in raw]
    if raw.get("format") not in (None, FORMAT_NAME) or missing or "draws" not in h5file:
        raise StorageError(
            f"{path} is an HDF5 file but not a hawkes chain file"
            + (f" (missing attributes: {', '.join(missing)})" if missing else "")
            + "; refusing to touch it: choose another run_dir or pass --overwrite"
        )
    attrs = {key: _decode(value) for key, value in raw.items()}
    if attrs["schema_version"] != SCHEMA_VERSION:
        raise StorageError(
            f"{path} is a chain file of schema {attrs['schema_version']!r}; this version of "
            f"hawkes reads schema {SCHEMA_VERSION}"
        )
    attrs["param_names"] = tuple(
        str(n) for n in _json_list(path, "param_names", attrs["param_names"])
    )
    fields = _json_list(path, "fields", attrs["fields"])
    try:
        attrs["fields"] = tuple((str(n), str(d)) for n, d in fields)
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{path}: root attribute 'fields' is not a list of pairs") from exc
    group = h5file["draws"]
    for name in attrs["param_names"] + tuple(n for n, _ in attrs["fields"]):
        if not isinstance(group.get(name), h5py.Dataset):
            raise StorageError(f"{path}: dataset /draws/{name} is missing; the file is corrupt")
    return attrs


def _read_rows(
    h5file: h5py.File, path: Path, names: tuple[str, ...], n: int
) -> dict[str, np.ndarray]:
    """The first ``n`` rows of every ``/draws`` dataset (the committed rows)."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        ds = h5file["draws"][name]
        if ds.shape[0] < n and h5file.swmr_mode:
            ds.refresh()
        if ds.shape[0] < n:
            raise StorageError(
                f"{path}: /draws/{name} has {ds.shape[0]} rows but the checkpoint "
                f"{sidecar_path(path)} records {n} committed draws; the chain file was "
                "replaced or truncated behind hawkes' back: restore it, or start over with "
                "--overwrite"
            )
        out[name] = np.asarray(ds[:n])
    return out


def _check_no_rows(h5file: h5py.File, path: Path, names: tuple[str, ...]) -> None:
    """A chain file without a commit record must hold no rows (hawkes writes the record when
    it creates the file): else the record was deleted and the rows cannot be trusted."""
    rows = max((h5file["draws"][name].shape[0] for name in names), default=0)
    if rows:
        raise StorageError(
            f"chain file {path} holds {rows} rows but its checkpoint {sidecar_path(path)} is "
            "missing, so which of them were committed is unknown; restore the checkpoint, or "
            "start over with --overwrite"
        )


def _check_sidecar_matches(
    side: Mapping[str, Any],
    attrs: Mapping[str, Any],
    path: Path,
) -> None:
    for key in ("chain_id", "config_sha256"):
        if side[key] != attrs[key]:
            raise StorageError(
                f"checkpoint {sidecar_path(path)} does not belong to {path} ({key} "
                f"{side[key]!r} != {attrs[key]!r}); restore the right files or start over "
                "with --overwrite"
            )


def is_chain_file(path: Path) -> bool:
    """Whether ``path`` is a hawkes chain file (an HDF5 file :func:`read_chain` would take)."""
    try:
        with h5py.File(path, "r") as h5file:
            _check_chain_file(h5file, Path(path))
    except (OSError, ValueError, StorageError):
        return False
    return True


def read_chain(path: Path) -> ChainDraws:
    """Read the committed draws of a chain file; safe while its writer is running.

    The file is opened read-only with SWMR and only the first ``n`` rows are read, ``n`` being
    the sidecar's committed count (rows beyond it belong to an unfinished commit). A file
    without a sidecar reads as 0 draws.

    Parameters
    ----------
    path
        The chain file (``chain-00.h5``).

    Returns
    -------
    ChainDraws

    Raises
    ------
    StorageError
        Missing, foreign or corrupt file, or a sidecar that does not match it.
    """
    path = Path(path)
    if not path.exists():
        raise StorageError(f"chain file {path} does not exist")
    # Sidecar first: rows [0, n) were flushed and fsynced before it was replaced.
    side = read_sidecar(path)
    with _open_reader(path) as h5file, _h5_errors(path):
        attrs = _check_chain_file(h5file, path)
        columns = tuple((name, "f8") for name in attrs["param_names"]) + attrs["fields"]
        names = tuple(name for name, _ in columns)
        if side is not None:
            _check_sidecar_matches(side, attrs, path)
        else:
            _check_no_rows(h5file, path, names)
        n = side["draws"] if side is not None else 0
        draws = _read_rows(h5file, path, names, n)
        if side is not None:
            _check_fingerprint(side, columns, draws, path)
    return ChainDraws(
        path=path,
        attrs=attrs,
        draws=draws,
        n_committed=n,
        committed_at=side.get("committed_at") if side is not None else None,
        checkpoint=side.get("checkpoint") if side is not None else None,
        last_iteration=side.get("last_iteration") if side is not None else None,
    )


# --------------------------------------------------------------------------- writing


def _write_layout(
    h5file: h5py.File, meta: ChainMeta, rows: Mapping[str, np.ndarray] | None
) -> None:
    """Attributes, ``/draws`` datasets (with ``rows`` if given), SWMR mode, flushed to disk."""
    for key, value in meta.to_attrs().items():
        h5file.attrs[key] = value
    group = h5file.create_group("draws")
    if "warmup" in dict(meta.fields):
        group.attrs["warmup_flag"] = "warmup"
    for name, dtype in meta.columns:
        data = np.asarray(rows[name], dtype=dtype) if rows is not None else None
        n = 0 if data is None else data.shape[0]
        group.create_dataset(
            name, shape=(n,), maxshape=(None,), chunks=(CHUNK_ROWS,), dtype=dtype, data=data
        )
    h5file.swmr_mode = True
    h5file.flush()
    _fsync_h5(h5file)


def _create_file(
    path: Path,
    meta: ChainMeta,
    rows: Mapping[str, np.ndarray] | None,
) -> h5py.File:
    """Write a complete chain file under a temporary name, then move it over ``path``.

    The file is switched to SWMR-write mode before it gets its final name, so the file under
    ``path`` can always be opened by a SWMR reader, even after the writer was killed.

    Returns
    -------
    h5py.File
        The open handle (SWMR-write mode) of the file now at ``path``.
    """
    try:
        with atomic.replacing(path) as tmp:
            h5file = h5py.File(tmp, "w", libver="latest", **_h5_kwargs())
            try:
                _write_layout(h5file, meta, rows)
            except BaseException as exc:
                _close_quietly(h5file, path, failed=isinstance(exc, (OSError, RuntimeError)))
                raise
    except (OSError, RuntimeError) as exc:  # h5py raises RuntimeError for failed writes too
        note_hdf5_write_failure()
        raise StorageError(
            f"cannot write chain file {path}: {io_cause(exc)}; nothing committed was lost: "
            "free disk space (or fix the folder's permissions) and run again"
        ) from exc
    return h5file


def _check_resume(attrs: Mapping[str, Any], meta: ChainMeta, path: Path) -> None:
    """Refuse to resume a chain file written for another chain, layout or config.

    The layout (datasets) is checked before the config: a file of an older version of the
    package has both another layout and another resolved config, and the layout is the reason
    it can never be continued.
    """
    if attrs["chain_id"] != meta.chain_id:
        raise StorageError(
            f"{path} belongs to chain {attrs['chain_id']}, not chain {meta.chain_id}; "
            "use a new run_dir or pass --overwrite"
        )
    if attrs["param_names"] != meta.param_names or attrs["fields"] != meta.fields:
        have = [n for n, _ in attrs["fields"]]
        want = [n for n, _ in meta.fields]
        missing = [n for n in want if n not in have]
        extra = [n for n in have if n not in want]
        detail = "".join(
            f"; {what}: {', '.join(names)}"
            for what, names in (("missing", missing), ("not expected", extra))
            if names
        )
        raise StorageError(
            f"{path} stores datasets {list(attrs['param_names'])} + {have}, expected "
            f"{list(meta.param_names)} + {want}{detail}: it was written with another draw "
            "layout (another version of hawkes_cli) and cannot be continued; its draws stay "
            "readable (hawkes-diagnose). Start a new run_dir, or pass --overwrite to discard "
            "its draws"
        )
    if attrs["config_sha256"] != meta.config_sha256:
        raise StorageError(
            f"{path} was written with a different config (sha256 {attrs['config_sha256']}, "
            f"now {meta.config_sha256}); use a new run_dir, or pass --overwrite to discard "
            "its draws"
        )
    was = str(attrs.get("events_sha256", ""))
    if was and meta.events_sha256 and was != meta.events_sha256:
        raise StorageError(
            f"{path} was written for other events than the config's data.events now holds "
            f"(content sha256 {was[:12]}..., now {meta.events_sha256[:12]}...): the events file "
            "changed since this chain started. Restore the original events to resume, or pass "
            "--overwrite to discard its draws and start afresh on the new events"
        )
    for key in ("kernel_sha256", "package_version"):
        if attrs.get(key) != getattr(meta, key):
            logger.warning(
                "resuming %s with %s %s (was %s)", path, key, getattr(meta, key), attrs.get(key)
            )


class ChainWriter:
    """The one writer of a chain file: buffers draws, commits them in blocks.

    Create with :meth:`open`. ``append`` only buffers; ``commit`` makes the buffered draws and a
    checkpoint durable together (see the module docstring). ``close`` (or leaving a ``with``
    block) does not commit.
    """

    def __init__(
        self,
        path: Path,
        meta: ChainMeta,
        h5file: h5py.File,
        lock: _WriterLock,
        n_committed: int,
        digest: Any = None,
        last_iteration: int | None = None,
    ) -> None:
        self._path = path
        self._meta = meta
        self._file: h5py.File | None = h5file
        self._lock = lock
        self._columns = meta.columns
        self._names = frozenset(name for name, _ in self._columns)
        self._datasets = {name: h5file["draws"][name] for name, _ in self._columns}
        self._buffer: dict[str, list[float | int]] = {name: [] for name, _ in self._columns}
        self._n_committed = n_committed
        self._n_pending = 0
        # the committed rows' fingerprint (sha256 of rows 0 .. n_committed-1, row-major)
        self._digest = hashlib.sha256() if digest is None else digest
        self._last_iteration = last_iteration
        self._failed = False  # an HDF5 write to this file failed (see close)

    @classmethod
    def open(
        cls,
        path: Path,
        meta: ChainMeta,
        *,
        overwrite: bool = False,
        check: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> tuple[ChainWriter, dict[str, Any] | None]:
        """Create a new chain file, or resume an existing one.

        Parameters
        ----------
        path
            The chain file (``RUN_DIR/chains/chain-00.h5``); its directory is created.
        meta
            The chain's identity; a resumed file must have the same schema, ``chain_id``,
            ``config_sha256`` and datasets.
        overwrite
            Discard any existing file and sidecar and start empty.
        check
            Called on resume with the verified commit record (None without one) before the
            file is rewritten; raises (a StorageError) to refuse the resume, files untouched.

        Returns
        -------
        (ChainWriter, dict or None)
            The writer, and the checkpoint payload of the last commit (None for a new chain or
            a file that never committed). On resume ``/draws`` holds exactly the committed
            draws; ``writer.n_committed`` is their number.

        Raises
        ------
        StorageError
            The file is foreign, corrupt or belongs to another chain/config (never touched
            then), the sidecar exists without the file, or another process writes the chain.
        """
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create directory {path.parent}: {exc}") from exc
        side = sidecar_path(path)
        lock = _WriterLock(path)
        try:
            if overwrite:
                if path.is_dir():
                    raise StorageError(f"{path} is a directory, not a chain file")
                if side.exists():
                    side.unlink()
                    atomic.fsync_dir(path.parent)
                return cls._new(path, meta, lock, "created chain file %s (overwrite)"), None
            if not path.exists():
                if side.exists():
                    raise StorageError(
                        f"checkpoint {side} exists but chain file {path} does not; its "
                        "committed draws are lost: restore the file, or pass --overwrite"
                    )
                return cls._new(path, meta, lock, "created chain file %s"), None
            return cls._resume(path, meta, lock, check)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _new(cls, path: Path, meta: ChainMeta, lock: _WriterLock, message: str) -> ChainWriter:
        """A fresh file with an empty commit record (so a missing record means a deleted one)."""
        h5file = _create_file(path, meta, None)
        writer = cls(path, meta, h5file, lock, 0)
        try:
            writer._write_record(None)
        except BaseException:
            h5file.close()
            raise
        logger.info(message, path)
        return writer

    @classmethod
    def _resume(
        cls,
        path: Path,
        meta: ChainMeta,
        lock: _WriterLock,
        check: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> tuple[ChainWriter, dict[str, Any] | None]:
        with _open_reader(path) as src, _h5_errors(path):
            attrs = _check_chain_file(src, path)
            side = read_sidecar(path)
            _check_resume(attrs, meta, path)
            names = tuple(name for name, _ in meta.columns)
            if side is not None:
                _check_sidecar_matches(side, attrs, path)
            else:
                _check_no_rows(src, path, names)
            n = side["draws"] if side is not None else 0
            rows = _read_rows(src, path, names, n)
            n_rows = max(src["draws"][name].shape[0] for name in names)
        if side is not None:
            _check_fingerprint(side, meta.columns, rows, path)
        if check is not None:
            check(side)
        digest = hashlib.sha256(_rows_bytes(meta.columns, rows, 0, n))
        last = int(rows["iteration"][n - 1]) if n and "iteration" in rows else None
        # Rewrite the committed prefix as a fresh file (atomic replace): this truncates the
        # uncommitted rows and clears the "open for writing" flags a killed writer leaves.
        h5file = _create_file(path, meta, rows)
        logger.info(
            "resumed chain file %s at %d committed draws (dropped %d uncommitted rows)",
            path,
            n,
            max(n_rows - n, 0),
        )
        checkpoint = side.get("checkpoint") if side is not None else None
        return cls(path, meta, h5file, lock, n, digest, last), checkpoint

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        """The chain file."""
        return self._path

    @property
    def meta(self) -> ChainMeta:
        """The chain's metadata."""
        return self._meta

    @property
    def n_committed(self) -> int:
        """Draws made durable by :meth:`commit` (rows ``0 .. n_committed-1`` of ``/draws``)."""
        return self._n_committed

    @property
    def n_pending(self) -> int:
        """Draws appended since the last commit (in memory only)."""
        return self._n_pending

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._file is None

    # ------------------------------------------------------------------ writing

    def _require_open(self) -> h5py.File:
        if self._file is None:
            raise StorageError(f"chain writer for {self._path} is closed")
        return self._file

    def append(self, draw: Mapping[str, float | int]) -> None:
        """Buffer one saved draw (no I/O).

        Parameters
        ----------
        draw
            One value per dataset: the parameters (natural scale) and every field, no others.

        Raises
        ------
        ValueError
            Missing or unknown keys.
        """
        self._require_open()
        if draw.keys() != self._names:
            missing = sorted(self._names - draw.keys())
            unknown = sorted(set(draw.keys()) - self._names)
            raise ValueError(
                f"draw for {self._path}: missing {missing or 'nothing'}, "
                f"unknown {unknown or 'nothing'}"
            )
        for name, values in self._buffer.items():
            values.append(draw[name])
        self._n_pending += 1

    def commit(self, checkpoint: Mapping[str, Any]) -> None:
        """Make the buffered draws and ``checkpoint`` durable together.

        Appends the buffered rows to the datasets, flushes and fsyncs the HDF5 file, then
        replaces the sidecar atomically. If anything fails the sidecar still describes the
        previous commit, the buffer is kept, and calling ``commit`` again is safe.

        Parameters
        ----------
        checkpoint
            JSON-serialisable payload (iteration, sampler state, RNG state, ...), returned by
            :meth:`open` on resume.
        """
        self._write_record(dict(checkpoint))

    def _write_record(self, checkpoint: dict[str, Any] | None) -> None:
        """:meth:`commit` (``checkpoint`` None: the empty record of a new file)."""
        h5file = self._require_open()
        n0, n1 = self._n_committed, self._n_committed + self._n_pending
        blocks = {
            name: np.asarray(self._buffer[name], dtype=dtype) for name, dtype in self._columns
        }
        digest = self._digest.copy()
        digest.update(_rows_bytes(self._columns, blocks, 0, n1 - n0))
        last = self._last_iteration
        if n1 > n0 and "iteration" in blocks:
            last = int(blocks["iteration"][-1])
        record: dict[str, Any] = {
            "schema": SIDECAR_SCHEMA,
            "chain_id": self._meta.chain_id,
            "config_sha256": self._meta.config_sha256,
            "draws": n1,
            "last_iteration": last,
            "draws_sha256": digest.hexdigest(),
            "committed_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "checkpoint": checkpoint,
        }
        try:  # fail on a non-serialisable payload before touching the file
            record["record_sha256"] = _record_digest(record)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"checkpoint payload is not JSON-serialisable: {exc}") from exc
        intact = (
            f"the last commit ({n0} draws) is intact: free disk space (or fix the file "
            "system) and run again to resume"
        )
        try:
            if n1 > n0:
                for name, block in blocks.items():
                    ds = self._datasets[name]
                    ds.resize((n1,))
                    ds[n0:n1] = block
                h5file.flush()
                _fsync_h5(h5file)
        except (OSError, RuntimeError) as exc:  # h5py raises RuntimeError for failed writes
            self._failed = True
            note_hdf5_write_failure()
            raise StorageError(
                f"cannot commit draws to {self._path}: {io_cause(exc)}; {intact}"
            ) from exc
        try:
            atomic.write_json(sidecar_path(self._path), record)
        except OSError as exc:
            raise StorageError(
                f"cannot commit draws to {self._path}: cannot write its commit record "
                f"({io_cause(exc)}); {intact}"
            ) from exc
        self._n_committed = n1
        self._n_pending = 0
        self._digest, self._last_iteration = digest, last
        for values in self._buffer.values():
            values.clear()

    def close(self) -> None:
        """Close the file and release the lock; pending (uncommitted) draws are dropped."""
        if self._file is None:
            return
        if self._n_pending:
            logger.warning(
                "closing %s with %d uncommitted draws (dropped)", self._path, self._n_pending
            )
        h5file, self._file = self._file, None
        datasets, self._datasets = self._datasets, {}
        if self._failed:
            _UNCLOSABLE.append(datasets)  # freeing them would make HDF5 flush again
        try:
            _close_quietly(h5file, self._path, failed=self._failed)
        finally:
            self._lock.release()

    def __enter__(self) -> ChainWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._file is None else "open"
        return (
            f"ChainWriter({str(self._path)!r}, {state}, committed={self._n_committed}, "
            f"pending={self._n_pending})"
        )
