"""The table files of ``--gof``: CSV, the events' HDF5 copy, the counties' GeoPackage."""

from __future__ import annotations

import csv
import io
import logging
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic
from ..errors import EventsError

log = logging.getLogger(__name__)


def write_csv(path: Path, header: list[str], columns: list[np.ndarray], fmts: list[str]) -> Path:
    """A CSV of equal-length ``columns`` under ``header``, each value formatted with its
    ``fmts`` entry (``""``: ``str``; NaN floats are left empty); returns ``path``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    cols = [
        [("" if (isinstance(v, float) and math.isnan(v)) else f % v) for v in col.tolist()]
        if f
        else [str(v) for v in col.tolist()]
        for col, f in zip(columns, fmts, strict=True)
    ]
    w.writerows(zip(*cols, strict=True))
    atomic.write_text(path, buf.getvalue(), make_parents=True)
    return path


def write_events_h5(path: Path, data: Any, mean: np.ndarray, sd: np.ndarray) -> Path:
    """``events.h5``: the events with their branching probabilities (gzip), for large N; built
    in memory, so a full disk is one :class:`~hawkes_cli.atomic.NoSpaceError`."""

    def build(f: Any) -> None:
        for name, values in (
            ("time", data.time),
            ("x", data.x),
            ("y", data.y),
            ("p_triggered", mean),
            ("p_triggered_sd", sd),
        ):
            f.create_dataset(name, data=values, compression="gzip", shuffle=True)
        if data.fips is not None:
            f.create_dataset("fips", data=data.fips.astype("S5"), compression="gzip")

    atomic.write_bytes(path, atomic.hdf5_image(build))
    return path


def write_counties_gpkg(path: Path, layer: Any, fields: dict[str, np.ndarray]) -> list[Path]:
    """``counties.gpkg``: the county polygons with their residuals, for a GIS (QGIS opens it);
    [] with a WARNING where it cannot be written (a core install without pyogrio)."""
    from ..counties import write_polygons

    try:
        with warnings.catch_warnings():  # synthetic coordinates have no reference system
            warnings.filterwarnings("ignore", "'crs' was not provided", UserWarning)
            write_polygons(layer, path, fields)
    except EventsError as exc:
        log.warning("counties.gpkg not written (%s); counties.csv holds the same numbers", exc)
        return []
    return [path]
