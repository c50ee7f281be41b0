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

Modules, each importing only those above it: :mod:`.schema` (the layout's version, the per-draw
fields, :class:`ChainMeta`, the sidecar names), :mod:`.record` (the commit record: checksum,
draws fingerprint, :func:`read_sidecar`), :mod:`.h5files` (h5py: SWMR readers, fsync, files
left open after a failed write), :mod:`.lock` (the writer lock, :func:`writer_holder`),
:mod:`.reader` (:func:`read_chain`), :mod:`.resume` (may this file be continued),
:mod:`.writer` (:class:`ChainWriter` and the commit).
"""

from __future__ import annotations

from .lock import writer_holder
from .reader import ChainDraws, is_chain_file, read_chain
from .record import SIDECAR_SCHEMA, read_sidecar
from .schema import (
    CHUNK_ROWS,
    DRAW_FIELDS,
    SCHEMA_VERSION,
    ChainMeta,
    lock_path,
    sidecar_path,
)
from .writer import ChainWriter

__all__ = [
    "CHUNK_ROWS",
    "DRAW_FIELDS",
    "SCHEMA_VERSION",
    "SIDECAR_SCHEMA",
    "ChainDraws",
    "ChainMeta",
    "ChainWriter",
    "is_chain_file",
    "lock_path",
    "read_chain",
    "read_sidecar",
    "sidecar_path",
    "writer_holder",
]
