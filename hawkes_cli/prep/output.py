"""The output of ``hawkes-prep hhs``: the events file, and in HDF5 a ``/dropped`` group.

``/dropped`` holds one entry per dropped row: ``record`` (1-based data record number; the file
line is ``record + 1`` when no value spans lines), ``reason`` (1-based index into the attribute
``reasons``, a JSON list of ``[key, sentence]``) and the row's ``hospital_pk``,
``collection_week`` and ``fips_code`` as written in the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..data import HDF5_SUFFIXES, EventData, save_events
from ..errors import EventsError
from .classify import REASONS


def dropped_table(cols: Mapping[str, np.ndarray], reason: np.ndarray) -> dict[str, np.ndarray]:
    """The ``/dropped`` entries of the rows with a nonzero ``reason``, shape (D,) each.

    Parameters
    ----------
    cols
        The text columns read (:class:`~hawkes_cli.prep.read.FacilityColumns`), shape (R,) each.
    reason : numpy.ndarray, shape (R,), int8
        :attr:`~hawkes_cli.prep.classify.RowPlan.reason`.
    """
    rows = np.flatnonzero(reason != 0)
    return {
        "record": rows.astype(np.int64) + 1,
        "reason": reason[rows].astype(np.uint8),
        "hospital_pk": cols["hospital_pk"][rows],
        "collection_week": cols["collection_week"][rows],
        "fips_code": cols["fips_code"][rows],
    }


def write_cases(data: EventData, dropped: Mapping[str, np.ndarray], out: Path) -> None:
    """Write the events, and for HDF5 a ``/dropped`` group (module docstring), atomically.

    Raises
    ------
    EventsError
        The file cannot be written; nothing is left behind and an old ``out`` stays as it was.
    """
    out = Path(out)
    if not out.name.lower().endswith(HDF5_SUFFIXES):
        save_events(data, out)
        return
    save_events(data, out, finish=lambda f: _add_dropped(f, dropped))


def _add_dropped(f: Any, dropped: Mapping[str, np.ndarray]) -> None:
    """Add the ``/dropped`` group to the HDF5 events file being built (an ``h5py.File``)."""
    group = f.create_group("dropped")
    group.attrs["reasons"] = json.dumps([[r.key, r.label] for r in REASONS])
    for name, values in dropped.items():
        arr = np.asarray(values)
        if arr.dtype.kind == "U":
            arr = np.char.encode(arr, "utf-8") if arr.size else arr.astype("S1")
        group.create_dataset(name, data=arr)


def read_dropped(path: Path) -> dict[str, Any]:
    """The ``/dropped`` group of an events file written by ``hawkes-prep hhs``.

    Returns
    -------
    dict
        ``record``, ``reason`` (keys of :data:`~hawkes_cli.prep.classify.REASONS`, as str),
        ``hospital_pk``, ``collection_week``, ``fips_code``: arrays of shape (D,).
    """
    import h5py

    with h5py.File(path, "r") as f:
        if "dropped" not in f:
            raise EventsError(f"{path}: no /dropped group (not written by hawkes-prep hhs?)")
        g = f["dropped"]
        keys = [k for k, _ in json.loads(g.attrs["reasons"])]
        out: dict[str, Any] = {}
        for name in g:
            arr = g[name][()]
            out[name] = np.char.decode(arr, "utf-8") if arr.dtype.kind == "S" else arr
        out["reason"] = np.array([keys[int(i) - 1] for i in out["reason"]], dtype=str)
    return out
