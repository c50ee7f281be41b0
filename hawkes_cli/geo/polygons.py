"""Polygons checked for triangulation: polygonal, non-empty, finite, valid (repaired), with
area; and their constrained Delaunay triangles (holes and the parts of a MultiPolygon
respected)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import EventsError, UsageError

log = logging.getLogger(__name__)

#: How many offending keys an error message lists.
MAX_LISTED = 5


def listing(values: Sequence[str], limit: int = MAX_LISTED) -> str:
    """``'a', 'b', ... (N in all)`` for an error message."""
    shown = ", ".join(repr(str(v)) for v in values[:limit])
    more = f", ... ({len(values)} in all)" if len(values) > limit else f" ({len(values)} in all)"
    return shown + more


def checked_polygons(keys: list[str], polygons: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The polygons as a 2-D object array, invalid ones repaired, and their areas.

    Parameters
    ----------
    keys : list of str, length K
        Key of each polygon (for the messages).
    polygons : sequence of shapely.Polygon or shapely.MultiPolygon, length K
        An invalid polygon is repaired with :func:`shapely.make_valid` (keeping its polygonal
        parts) and a WARNING is logged.

    Returns
    -------
    geoms : (K,) object
        2-D (Multi)Polygons.
    areas : (K,) float64
        Their areas, coordinate units squared, all > 0.

    Raises
    ------
    EventsError
        A polygon is missing, empty, not polygonal, has non-finite coordinates or zero area
        (the message names its key).
    UsageError
        ``keys`` and ``polygons`` differ in length.
    """
    import shapely

    geoms = np.asarray(list(polygons), dtype=object)
    if len(keys) != len(geoms):
        raise UsageError(f"{len(keys)} keys but {len(geoms)} polygons: give one key each")
    if not keys:
        raise EventsError("no polygons given: a polygon sampler needs at least one")
    missing = [k for k, g in zip(keys, geoms, strict=True) if not isinstance(g, shapely.Geometry)]
    if missing:
        raise EventsError(f"polygons missing (not geometries): {listing(missing)}")
    geoms = geoms.astype(object)
    kinds = shapely.get_type_id(geoms)
    polygonal = (kinds == shapely.GeometryType.POLYGON) | (
        kinds == shapely.GeometryType.MULTIPOLYGON
    )
    if not np.all(polygonal):
        bad = np.flatnonzero(~polygonal)
        raise EventsError(
            f"geometries that are not (Multi)Polygons: {listing([keys[i] for i in bad])}; "
            f"the first is a {geoms[bad[0]].geom_type}"
        )
    empty = shapely.is_empty(geoms)
    if np.any(empty):
        raise EventsError(f"empty polygons: {listing([keys[i] for i in np.flatnonzero(empty)])}")
    coords, which = shapely.get_coordinates(geoms, return_index=True)
    nonfinite = np.unique(which[~np.isfinite(coords).all(axis=1)])
    if nonfinite.size:
        bad = [keys[i] for i in nonfinite]
        raise EventsError(f"polygons with non-finite coordinates: {listing(bad)}")
    geoms = _repaired(keys, shapely.force_2d(geoms))
    areas = shapely.area(geoms)
    zero = np.flatnonzero(~(areas > 0))
    if zero.size:
        raise EventsError(f"polygons with zero area: {listing([keys[i] for i in zero])}")
    return geoms, areas


def _repaired(keys: list[str], geoms: np.ndarray) -> np.ndarray:
    """``geoms`` with each invalid one replaced by the polygonal part of its
    :func:`shapely.make_valid` (in place), with a WARNING naming them."""
    import shapely

    invalid = np.flatnonzero(~shapely.is_valid(geoms))
    if invalid.size:
        log.warning(
            "repairing %d invalid polygon(s) with shapely.make_valid: %s",
            invalid.size,
            listing([keys[i] for i in invalid]),
        )
        for i in invalid:
            geoms[i] = polygonal_part(shapely.make_valid(geoms[i]))
    return geoms


def triangulate(geoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Constrained Delaunay triangles of checked polygons.

    Returns
    -------
    triangles : (T, 3, 2) float64
        Vertices, grouped by polygon.
    owner : (T,) int64
        Polygon index of each triangle, non-decreasing.

    Raises
    ------
    EventsError
        shapely returned something other than triangles.
    """
    import shapely

    collections = shapely.constrained_delaunay_triangles(geoms)
    tri_geoms, owner = shapely.get_parts(collections, return_index=True)
    coords = shapely.get_coordinates(shapely.get_exterior_ring(tri_geoms))
    if coords.shape[0] != 4 * tri_geoms.size:
        raise EventsError("polygon triangulation returned something other than triangles")
    triangles = coords.reshape(-1, 4, 2)[:, :3, :]
    order = np.argsort(owner, kind="stable")
    return triangles[order], owner[order]


def polygonal_part(geom: Any) -> Any:
    """The polygonal parts of a geometry (e.g. from ``make_valid``) as a (Multi)Polygon."""
    import shapely

    parts = shapely.get_parts(geom)
    polys = []
    for part in parts:
        if part.geom_type == "Polygon":
            polys.append(part)
        elif part.geom_type in ("MultiPolygon", "GeometryCollection"):
            sub = polygonal_part(part)
            polys.extend(shapely.get_parts(sub) if not sub.is_empty else [])
    if not polys:
        return shapely.Polygon()
    return polys[0] if len(polys) == 1 else shapely.MultiPolygon(polys)
