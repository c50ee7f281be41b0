"""Polygon files (shapefile, GeoPackage, any OGR vector file) read into a :class:`PolygonLayer`:
keys, geometries, attribute fields and a reference-system label (needs pyogrio and shapely,
imported inside the functions)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EventsError, UsageError
from .polygons import listing

log = logging.getLogger(__name__)


def require_pyogrio(what: str, hint: str = "") -> Any:
    """Import pyogrio (and ``pyogrio.raw``), or say that ``what`` needs it.

    Parameters
    ----------
    what
        What needs it, starting the message (e.g. ``"counties.shp: reading polygon files"``).
    hint
        Appended after ``; `` (e.g. how to do without it).

    Raises
    ------
    EventsError
        pyogrio is not installed.
    """
    try:
        import pyogrio
        import pyogrio.raw
    except ImportError:
        tail = f"; {hint}" if hint else ""
        raise EventsError(f"{what} needs pyogrio (pip install pyogrio){tail}") from None
    return pyogrio


@dataclass(frozen=True, eq=False)
class PolygonLayer:
    """Polygons read from a vector file, with their attribute fields.

    Attributes
    ----------
    keys : numpy.ndarray, shape (K,), str
        Value of the key field (e.g. FIPS) of each feature, stripped; unique.
    geoms : numpy.ndarray, shape (K,), object
        shapely geometries ((Multi)Polygons in a county file), coordinate units of ``crs``.
    fields : Mapping[str, numpy.ndarray]
        Other attribute fields that were asked for, each shape (K,).
    crs : str or None
        Reference system (declared by the file, or given).
    path : str
        The file.
    """

    keys: np.ndarray
    geoms: np.ndarray
    fields: Mapping[str, np.ndarray]
    crs: str | None
    path: str


def require_polygon_file(path: str | Path, where: str = "") -> None:
    """Raise :class:`EventsError` when the county polygon file ``path`` is not there (``where``:
    what named it, e.g. ``"data.counties"``), before anything reads or writes."""
    if not Path(path).exists():
        named = f" ({where})" if where else ""
        raise EventsError(f"{path}: county polygon file not found{named}")


def read_polygon_layer(
    path: Path,
    *,
    key_field: str = "GEOID",
    fields: Sequence[str] = (),
    crs: str | None = None,
    encoding: str | None = None,
    layer: str | int | None = None,
    field_hint: str = "",
    pyogrio_hint: str = "",
) -> PolygonLayer:
    """Read keyed polygons and some attribute fields from an OGR vector file.

    Needs pyogrio and shapely.

    Parameters
    ----------
    path
        Shapefile (the ``.shp`` with its ``.shx`` and ``.dbf`` beside it), GeoPackage or other
        OGR vector file.
    key_field
        Attribute holding each polygon's key, read as text (``GEOID``: 5-digit FIPS).
    fields
        Further attribute fields to return (e.g. ``NAME``, ``ALAND``).
    crs
        Reference system of the file's coordinates when the file declares none (the Census
        county shapefile in ``plotly-geo`` ships no ``.prj``: pass ``"EPSG:4269"``). When the
        file declares one, ``crs`` must name the same (compared as text, case-insensitively);
        nothing is reprojected.
    encoding
        Text encoding of the attribute table when the file does not say (e.g. ``"utf-8"``).
    layer
        Layer name or index (default: the first).
    field_hint, pyogrio_hint
        Added to the message of a missing field (in brackets) or of a missing pyogrio (after
        ``; ``), e.g. which command-line options choose the fields.

    Returns
    -------
    PolygonLayer
        One entry per feature, in file order.

    Raises
    ------
    EventsError
        pyogrio is not installed, the file is missing or unreadable, a field is not one of its
        fields (the message lists them), a key is blank or repeated, or a geometry is missing or
        unreadable.
    UsageError
        ``crs`` contradicts the file's declared reference system.
    """
    path = Path(path)
    require_polygon_file(path)
    pyogrio = require_pyogrio(f"{path}: reading polygon files", pyogrio_hint)
    import shapely

    meta, info, wkb, values = _read_features(
        pyogrio, path, [key_field, *fields], layer, encoding, field_hint
    )
    file_crs = _declared_crs(path, meta.get("crs") or info.get("crs"), crs)
    names = [str(f) for f in meta["fields"]]
    by_name = {n: np.asarray(v, dtype=object) for n, v in zip(names, values, strict=True)}
    keys = _feature_keys(path, by_name[key_field], key_field, wkb)
    try:
        geoms = shapely.from_wkb(np.asarray(wkb, dtype=object))
    except Exception as exc:
        raise EventsError(f"{path}: unreadable geometry: {exc}") from None
    return PolygonLayer(
        keys=keys,
        geoms=geoms,
        fields={f: by_name[f] for f in fields},
        crs=str(file_crs or crs) if (file_crs or crs) else None,
        path=str(path),
    )


def _read_features(
    pyogrio: Any,
    path: Path,
    columns: list[str],
    layer: str | int | None,
    encoding: str | None,
    field_hint: str,
) -> tuple[dict[str, Any], dict[str, Any], Any, Any]:
    """pyogrio's layer info and its raw read of ``columns``: ``(meta, info, wkb, values)``.

    Raises
    ------
    EventsError
        The file is not a vector file, lacks a column (the message lists its fields) or a
        geometry column, or its features cannot be read.
    """
    try:
        info = pyogrio.read_info(path, layer=layer, encoding=encoding)
    except Exception as exc:
        raise EventsError(f"{path}: cannot read as a vector file: {exc}") from None
    have = [str(f) for f in info.get("fields", [])]
    missing = [f for f in columns if f not in have]
    if missing:
        hint = f" ({field_hint})" if field_hint else ""
        raise EventsError(
            f"{path}: no field{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(m) for m in missing)}; its fields are: "
            f"{', '.join(have) or '(none)'}{hint}"
        )
    try:
        meta, _, wkb, values = pyogrio.raw.read(
            path, layer=layer, encoding=encoding, columns=columns
        )
    except Exception as exc:
        raise EventsError(f"{path}: cannot read features: {exc}") from None
    if wkb is None:
        raise EventsError(f"{path}: the layer has no geometry column")
    return meta, info, wkb, values


def _declared_crs(path: Path, file_crs: Any, crs: str | None) -> Any:
    """The file's reference system, checked against the one given (a WARNING when neither
    names one).

    Raises
    ------
    UsageError
        Both name one, and not the same.
    """
    if file_crs and crs and str(file_crs).strip().upper() != str(crs).strip().upper():
        raise UsageError(
            f"{path}: the file's reference system is {file_crs}, not {crs}; reproject the "
            "file first (nothing is reprojected here) or leave crs unset"
        )
    if not file_crs and not crs:
        log.warning("%s declares no reference system; pass crs to record one", path)
    return file_crs


def _feature_keys(path: Path, raw_keys: np.ndarray, key_field: str, wkb: Any) -> np.ndarray:
    """The features' keys, stripped: (K,) str.

    Raises
    ------
    EventsError
        A key is blank or repeated, or a feature has no geometry.
    """
    blank = [i for i, k in enumerate(raw_keys) if k is None or not str(k).strip()]
    if blank:
        raise EventsError(
            f"{path}: {len(blank)} feature(s) with a blank {key_field!r} "
            f"(first at feature {blank[0]})"
        )
    keys = np.array([str(k).strip() for k in raw_keys], dtype=str)
    nogeom = [str(keys[i]) for i, g in enumerate(wkb) if g is None]
    if nogeom:
        raise EventsError(f"{path}: features without a geometry: {listing(nogeom)}")
    uniq, counts = np.unique(keys, return_counts=True)
    if np.any(counts > 1):
        raise EventsError(f"{path}: duplicate polygon keys: {listing(list(uniq[counts > 1]))}")
    return keys
