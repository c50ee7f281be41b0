"""Events: the in-memory table (:class:`EventData`), loading with validation, atomic saving.

An events file (DESIGN section 4) is either

- a CSV file (``.csv``, or gzip-compressed ``.csv.gz``) with a header row naming the columns
  ``time``, ``x``, ``y`` (required), ``density`` and ``fips`` (optional); other columns are
  ignored; or
- an HDF5 file (``.h5``, ``.hdf5``, ``.he5``) with a group ``/events`` holding 1-D datasets of
  those names; the group's attributes are the metadata (:attr:`EventData.attrs`).

Units: ``time`` in the data's time unit (normally days, ``attrs["time_unit"]``), ``x``/``y`` in
coordinate units (``attrs["crs"]``), ``density`` in persons per square mile.

Every problem with an input file is an :class:`~hawkes_cli.errors.EventsError` whose message
names the file, the column, the first bad row (1-based line number in a CSV file, 0-based index in
an HDF5 dataset) and what to do. Rows are never dropped; rows out of time order are sorted (stable)
and a WARNING says how many moved.

h5py is imported only inside the functions that read or write HDF5, so importing this package is
cheap.

Modules, each importing only those above it: :mod:`.formats` (columns, suffixes, the HDF5
group), :mod:`.events` (:class:`EventData`, :class:`FrozenAttrs`, a run's window end and area),
:mod:`.validate` (checks of parsed columns, shared by the readers), :mod:`.csv_file` and
:mod:`.hdf5_file` (one format each), :mod:`.files` (:func:`load_events`, :func:`save_events`).
"""

from __future__ import annotations

from .events import EventData, FrozenAttrs, check_window_end, resolve_area
from .files import load_events, save_events
from .formats import HDF5_SUFFIXES, SUFFIXES

__all__ = [
    "HDF5_SUFFIXES",
    "SUFFIXES",
    "EventData",
    "FrozenAttrs",
    "check_window_end",
    "load_events",
    "resolve_area",
    "save_events",
]
