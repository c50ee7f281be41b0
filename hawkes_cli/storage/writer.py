"""The one writer of a chain file (:class:`ChainWriter`) and its commit protocol."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from .. import atomic
from ..errors import StorageError, io_cause, note_hdf5_write_failure
from .h5files import close_quietly, fsync_h5, h5_kwargs, keep_open
from .lock import WriterLock
from .record import SIDECAR_SCHEMA, record_digest, rows_bytes
from .resume import read_committed
from .schema import CHUNK_ROWS, ChainMeta, sidecar_path

logger = logging.getLogger(__name__)


def _write_layout(
    h5file: h5py.File, meta: ChainMeta, rows: Mapping[str, np.ndarray] | None
) -> None:
    """Attributes and ``/draws`` datasets (with ``rows`` if given)."""
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


def _create_file(
    path: Path,
    meta: ChainMeta,
    rows: Mapping[str, np.ndarray] | None,
) -> h5py.File:
    """Write a complete chain file under a temporary name, then move it over ``path``.

    The file is built in memory (:func:`hawkes_cli.atomic.hdf5_image`) and written with plain
    writes, so a full disk fails before HDF5 touches the disk (nothing to free, nothing left
    behind). It is then opened and switched to SWMR-write mode before it gets its final name,
    so the file under ``path`` can always be opened by a SWMR reader, even after the writer was
    killed.

    Returns
    -------
    h5py.File
        The open handle (SWMR-write mode) of the file now at ``path``.
    """
    image = atomic.hdf5_image(lambda f: _write_layout(f, meta, rows), libver="latest")
    h5file: h5py.File | None = None
    in_hdf5 = False  # whether HDF5 itself failed to write (then the file stays open)
    try:
        with atomic.replacing(path) as tmp:
            atomic.fill(tmp, image)
            h5file = h5py.File(tmp, "r+", libver="latest", **h5_kwargs())
            try:
                h5file.swmr_mode = True
                h5file.flush()
                fsync_h5(h5file)
            except BaseException as exc:
                in_hdf5 = isinstance(exc, (OSError, RuntimeError))
                close_quietly(h5file, path, failed=in_hdf5)
                raise
    except (OSError, RuntimeError) as exc:
        if in_hdf5:
            note_hdf5_write_failure()
        elif h5file is not None:  # the rename failed: a sound file, closed as any other
            close_quietly(h5file, path, failed=False)
        raise StorageError(
            f"cannot write chain file {path}: {io_cause(exc)}{atomic.room_hint(exc)}; nothing "
            "committed was lost: free disk space (or fix the folder's permissions) and run again"
        ) from exc
    assert h5file is not None
    return h5file


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
        lock: WriterLock,
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
        check: Callable[[dict[str, Any] | None, ChainMeta], None] | None = None,
    ) -> tuple[ChainWriter, dict[str, Any] | None]:
        """Create a new chain file, or resume an existing one.

        Parameters
        ----------
        path
            The chain file (``RUN_DIR/chains/chain-00.h5``); its directory is created.
        meta
            The chain's identity; a resumed file must have the same schema, ``chain_id``,
            ``config_sha256`` (or a config differing in ``RUN_ONLY_KEYS`` only: the file
            keeps its own) and datasets.
        overwrite
            Discard any existing file and sidecar and start empty.
        check
            Called on resume with the verified commit record (None without one) and the file's
            identity before the file is rewritten; raises (a StorageError) to refuse the
            resume, files untouched.

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
        lock = WriterLock(path)
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
    def _new(cls, path: Path, meta: ChainMeta, lock: WriterLock, message: str) -> ChainWriter:
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
        lock: WriterLock,
        check: Callable[[dict[str, Any] | None, ChainMeta], None] | None = None,
    ) -> tuple[ChainWriter, dict[str, Any] | None]:
        committed = read_committed(path, meta, check)
        n, rows, meta = committed.n, committed.rows, committed.meta
        digest = hashlib.sha256(rows_bytes(meta.columns, rows, 0, n))
        last = int(rows["iteration"][n - 1]) if n and "iteration" in rows else None
        # Rewrite the committed prefix as a fresh file (atomic replace): this truncates the
        # uncommitted rows and clears the "open for writing" flags a killed writer leaves.
        h5file = _create_file(path, meta, rows)
        logger.info(
            "resumed chain file %s at %d committed draws (dropped %d uncommitted rows)",
            path,
            n,
            max(committed.n_rows - n, 0),
        )
        side = committed.side
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
        digest.update(rows_bytes(self._columns, blocks, 0, n1 - n0))
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
            record["record_sha256"] = record_digest(record)
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
                fsync_h5(h5file)
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
            keep_open(datasets)  # freeing them would make HDF5 flush again
        try:
            close_quietly(h5file, self._path, failed=self._failed)
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
