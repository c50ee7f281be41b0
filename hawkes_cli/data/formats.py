"""The events file formats: columns, suffixes and the HDF5 group (DESIGN section 4)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: Required columns, in file order.
REQUIRED_COLUMNS: tuple[str, ...] = ("time", "x", "y")
#: Optional columns, in file order.
OPTIONAL_COLUMNS: tuple[str, ...] = ("density", "fips")
CSV_SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz")
HDF5_SUFFIXES: tuple[str, ...] = (".h5", ".hdf5", ".he5")
#: Every suffix :func:`~hawkes_cli.data.load_events` and :func:`~hawkes_cli.data.save_events`
#: accept.
SUFFIXES: tuple[str, ...] = CSV_SUFFIXES + HDF5_SUFFIXES
#: Name of the HDF5 group holding the event columns.
HDF5_GROUP = "events"
FIPS_DTYPE = np.dtype("<U5")

PathLike = str | os.PathLike[str]


def file_kind(path: Path) -> str:
    """``"csv"`` or ``"hdf5"`` from the file name, or ``""`` if the suffix is not accepted."""
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(HDF5_SUFFIXES):
        return "hdf5"
    return ""


def is_gz(path: Path) -> bool:
    """Whether ``path`` names a gzip-compressed file."""
    return path.name.lower().endswith(".gz")


def suffix_text() -> str:
    """The accepted suffixes, for messages."""
    return ", ".join(SUFFIXES)
