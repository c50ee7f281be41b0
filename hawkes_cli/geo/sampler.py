"""The polygon sampler: uniform points inside keyed polygons, vectorised and O(N) per draw
(the algorithm is in the package docstring, :mod:`hawkes_cli.geo`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import EventsError, UsageError
from .files import PolygonLayer, read_polygon_layer
from .polygons import checked_polygons, listing, triangulate

if TYPE_CHECKING:
    import shapely

    from ..simulate import DensityGrid

log = logging.getLogger(__name__)

#: Largest relative difference allowed between a polygon's area and the sum of its triangles'.
AREA_RTOL = 1e-9


def _triangle_areas(triangles: np.ndarray) -> np.ndarray:
    """Unsigned areas of triangles.

    Parameters
    ----------
    triangles : numpy.ndarray, shape (T, 3, 2), float64
        Vertices ``A, B, C`` of each triangle.

    Returns
    -------
    numpy.ndarray, shape (T,), float64
        ``|cross(B - A, C - A)| / 2``, coordinate units squared.
    """
    ab = triangles[:, 1] - triangles[:, 0]
    ac = triangles[:, 2] - triangles[:, 0]
    return 0.5 * np.abs(ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0])


@dataclass(frozen=True, eq=False)
class PolygonSampler:
    """Uniform points inside a set of keyed polygons (counties), vectorised and O(N) per draw.

    Build one with :meth:`from_polygons`, :meth:`from_boxes`, :meth:`from_grid` or
    :meth:`from_file`; the constructor takes an already triangulated set and derives the rest.
    Zero-area triangles are dropped on construction (they could never be drawn).

    Attributes
    ----------
    keys : tuple of str, length K
        Key of each polygon (e.g. 5-character FIPS codes), unique.
    triangles : numpy.ndarray, shape (T, 3, 2), float64
        Triangle vertices, coordinate units; the triangles of polygon ``k`` are the rows
        ``offsets[k]:offsets[k+1]`` (read-only).
    tri_owner : numpy.ndarray, shape (T,), int64
        Polygon index of each triangle, non-decreasing (read-only).
    crs : str or None
        The coordinates' reference system, when known (e.g. ``"EPSG:4269"``); a label only.
    cum_area : numpy.ndarray, shape (T,), float64
        Cumulative triangle area within each polygon divided by the polygon's area, so each
        polygon's last entry is exactly 1.0 (derived, read-only).
    offsets : numpy.ndarray, shape (K + 1,), int64
        Start of each polygon's triangles; ``offsets[K] == T`` (derived, read-only).
    tri_area : numpy.ndarray, shape (T,), float64
        Area of each triangle, coordinate units squared (derived, read-only).
    """

    keys: tuple[str, ...]
    triangles: np.ndarray
    tri_owner: np.ndarray
    crs: str | None = None
    cum_area: np.ndarray = field(init=False, repr=False)
    offsets: np.ndarray = field(init=False, repr=False)
    tri_area: np.ndarray = field(init=False, repr=False)
    _poly_area: np.ndarray = field(init=False, repr=False)
    _search_key: np.ndarray = field(init=False, repr=False)
    _sorted_keys: np.ndarray = field(init=False, repr=False)
    _sorted_index: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keys = tuple(str(k) for k in self.keys)
        n_poly = len(keys)
        if n_poly == 0:
            raise EventsError("no polygons given: a polygon sampler needs at least one")
        triangles = np.array(self.triangles, dtype=np.float64)
        owner = np.array(self.tri_owner, dtype=np.int64)
        if triangles.ndim != 3 or triangles.shape[1:] != (3, 2):
            raise UsageError(f"triangles must have shape (T, 3, 2), got {triangles.shape}")
        if owner.shape != triangles.shape[:1]:
            raise UsageError(
                f"tri_owner must have shape ({triangles.shape[0]},), got {owner.shape}"
            )
        if not np.all(np.isfinite(triangles)):
            bad = np.unique(owner[~np.isfinite(triangles).all(axis=(1, 2))])
            raise EventsError(
                "polygons with non-finite coordinates: "
                + listing([keys[i] for i in bad if 0 <= i < n_poly])
            )
        if owner.size and (owner.min() < 0 or owner.max() >= n_poly):
            raise UsageError(f"tri_owner values must lie in [0, {n_poly}), one per polygon key")
        if np.any(np.diff(owner) < 0):
            raise UsageError("triangles must be grouped by owner (tri_owner non-decreasing)")
        sorted_index = np.argsort(np.array(keys), kind="stable")
        sorted_keys = np.array(keys)[sorted_index]
        dup = sorted_keys[1:][sorted_keys[1:] == sorted_keys[:-1]]
        if dup.size:
            raise EventsError(f"duplicate polygon keys: {listing(list(np.unique(dup)))}")

        tri_area = _triangle_areas(triangles)
        keep = tri_area > 0
        if not np.all(keep):
            triangles, owner, tri_area = triangles[keep], owner[keep], tri_area[keep]
        poly_area = np.bincount(owner, weights=tri_area, minlength=n_poly)
        counts = np.bincount(owner, minlength=n_poly)
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            raise EventsError(
                "polygons with zero area (empty or degenerate): "
                + listing([keys[i] for i in empty])
            )
        offsets = np.zeros(n_poly + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # Cumulative share of the owner's area: a global cumsum of the shares (each owner's add up
        # to 1) less the owner's starting value; the rounding error is ~K ulp of 1, and the last
        # entry of each owner is set to exactly 1.
        share = tri_area / poly_area[owner]
        cum = np.cumsum(share)
        start_cum = np.concatenate(([0.0], cum[offsets[1:-1] - 1]))
        cum_area = cum - start_cum[owner]
        cum_area[offsets[1:] - 1] = 1.0
        np.minimum(cum_area, 1.0, out=cum_area)
        search_key = owner.astype(np.float64) + cum_area

        for name, value in (
            ("triangles", triangles),
            ("tri_owner", owner),
            ("cum_area", cum_area),
            ("offsets", offsets),
            ("tri_area", tri_area),
            ("_poly_area", poly_area),
            ("_search_key", search_key),
            ("_sorted_keys", sorted_keys),
            ("_sorted_index", sorted_index),
        ):
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "keys", keys)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_polygons(
        cls,
        keys: Sequence[str],
        polygons: Sequence[shapely.Polygon | shapely.MultiPolygon],
        *,
        crs: str | None = None,
    ) -> PolygonSampler:
        """Triangulate polygons once (constrained Delaunay: holes and parts respected).

        Parameters
        ----------
        keys : sequence of str, length K
            Unique key of each polygon (e.g. 5-character FIPS codes).
        polygons : sequence of shapely.Polygon or shapely.MultiPolygon, length K
            Polygons in coordinate units. An invalid polygon is repaired with
            :func:`shapely.make_valid` (keeping its polygonal parts) and a WARNING is logged.
        crs
            Label of the coordinates' reference system, kept on the sampler.

        Returns
        -------
        PolygonSampler

        Raises
        ------
        EventsError
            A polygon is missing, empty, not polygonal, has non-finite coordinates or zero area
            (the message names its key), or its triangles do not add up to its area.
        UsageError
            ``keys`` and ``polygons`` differ in length.
        """
        keys = [str(k) for k in keys]
        geoms, areas = checked_polygons(keys, polygons)
        triangles, owner = triangulate(geoms)
        sampler = cls(keys=tuple(keys), triangles=triangles, tri_owner=owner, crs=crs)
        rel = np.abs(sampler._poly_area - areas) / areas
        off = np.flatnonzero(rel > AREA_RTOL)
        if off.size:
            raise EventsError(
                "triangles do not cover these polygons (self-intersecting or overlapping rings?): "
                + listing([keys[i] for i in off])
            )
        log.debug(
            "triangulated %d polygons into %d triangles", len(keys), sampler.triangles.shape[0]
        )
        return sampler

    @classmethod
    def from_boxes(
        cls, keys: Sequence[str], boxes: np.ndarray, *, crs: str | None = None
    ) -> PolygonSampler:
        """Axis-aligned rectangles, two triangles each (no shapely needed).

        Parameters
        ----------
        keys : sequence of str, length K
            Unique key of each box.
        boxes : array_like, shape (K, 4), float64
            ``(x0, x1, y0, y1)`` of each box, coordinate units, finite with ``x0 < x1`` and
            ``y0 < y1``.
        crs
            Label of the coordinates' reference system.

        Returns
        -------
        PolygonSampler

        Raises
        ------
        EventsError
            A box is not finite or has zero width or height (the message names its key).
        UsageError
            ``boxes`` is not (K, 4) with one row per key.
        """
        keys = [str(k) for k in keys]
        b = np.asarray(boxes, dtype=np.float64)
        if b.ndim != 2 or b.shape[1] != 4 or b.shape[0] != len(keys):
            raise UsageError(
                f"boxes must have shape ({len(keys)}, 4) as x0, x1, y0, y1; got {b.shape}"
            )
        x0, x1, y0, y1 = b.T
        bad = ~(np.isfinite(b).all(axis=1) & (x0 < x1) & (y0 < y1))
        if np.any(bad):
            raise EventsError(
                "boxes must be finite with x0 < x1 and y0 < y1: "
                + listing([keys[i] for i in np.flatnonzero(bad)])
            )
        lower = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1)], 1)
        upper = np.stack([np.stack([x0, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)
        triangles = np.stack([lower, upper], axis=1).reshape(-1, 3, 2)
        owner = np.repeat(np.arange(len(keys), dtype=np.int64), 2)
        return cls(keys=tuple(keys), triangles=triangles, tri_owner=owner, crs=crs)

    @classmethod
    def from_grid(cls, grid: DensityGrid, *, crs: str | None = None) -> PolygonSampler:
        """The synthetic square counties of :class:`hawkes_cli.simulate.DensityGrid`.

        Parameters
        ----------
        grid
            Its cells become boxes keyed by their FIPS codes, in cell-index order, so
            ``codes(grid.fips_codes())`` is ``arange(nx * ny)``.
        crs
            Label of the coordinates' reference system.
        """
        cells = grid.polygons()
        return cls.from_boxes([k for k, _ in cells], np.array([b for _, b in cells]), crs=crs)

    @classmethod
    def from_file(
        cls,
        path: Path,
        *,
        key_field: str = "GEOID",
        crs: str | None = None,
        layer: str | int | None = None,
        encoding: str | None = None,
    ) -> PolygonSampler:
        """Read polygons from a shapefile, GeoPackage or other OGR vector file (needs pyogrio).

        Parameters
        ----------
        path, key_field, crs, layer, encoding
            As in :func:`read_polygon_layer`.

        Returns
        -------
        PolygonSampler
            One polygon per feature, in file order, keyed by ``key_field``.

        Raises
        ------
        EventsError
            As in :func:`read_polygon_layer`, or a geometry is empty or not polygonal.
        UsageError
            ``crs`` contradicts the file's declared reference system.
        """
        polys = read_polygon_layer(
            path, key_field=key_field, crs=crs, encoding=encoding, layer=layer
        )
        return cls.from_layer(polys)

    @classmethod
    def from_layer(cls, layer: PolygonLayer) -> PolygonSampler:
        """Triangulate the polygons of a :class:`PolygonLayer`, keyed by its keys.

        Raises
        ------
        EventsError
            As in :meth:`from_polygons`, the message starting with the layer's file.
        """
        try:
            sampler = cls.from_polygons(list(layer.keys), layer.geoms, crs=layer.crs)
        except EventsError as exc:
            raise EventsError(f"{layer.path}: {exc.message}") from None
        log.info(
            "read %d polygons (%d triangles) from %s",
            len(sampler.keys),
            sampler.triangles.shape[0],
            layer.path,
        )
        return sampler

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        """Number of polygons K."""
        return len(self.keys)

    def codes(self, keys: np.ndarray) -> np.ndarray:
        """Polygon index of each key.

        Parameters
        ----------
        keys : array_like of str, shape (N,)
            Polygon keys (e.g. each event's FIPS code), compared as exact text.

        Returns
        -------
        numpy.ndarray, shape (N,), int64
            Index into :attr:`keys` of each entry.

        Raises
        ------
        EventsError
            Some keys name no polygon; the message gives how many and up to five of them.
        """
        q = np.asarray(keys)
        if q.ndim != 1:
            raise UsageError(f"keys must be a 1-D array, got shape {q.shape}")
        q = q.astype(str)
        if q.size == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.searchsorted(self._sorted_keys, q)
        pos = np.minimum(pos, self._sorted_keys.size - 1)
        found = self._sorted_keys[pos] == q
        if not np.all(found):
            unknown = np.unique(q[~found])
            hint = ""
            widths = np.unique(np.char.str_len(self._sorted_keys))
            if widths.size == 1:
                padded = np.char.zfill(unknown, int(widths[0]))
                if np.any(np.isin(padded, self._sorted_keys)):
                    hint = f"; keys are zero-padded text (e.g. {str(self._sorted_keys[0])!r})"
            raise EventsError(
                f"{int(np.count_nonzero(~found))} event(s) have keys that name no polygon; "
                f"{unknown.size} unknown key(s): {listing(list(unknown))}{hint}"
            )
        return self._sorted_index[pos].astype(np.int64)

    def area(self) -> np.ndarray:
        """Area of each polygon: shape (K,), float64, coordinate units squared (a copy)."""
        return self._poly_area.copy()

    def centroids(self) -> np.ndarray:
        """Area centroid of each polygon: shape (K, 2), float64, coordinate units.

        The centroid of a MultiPolygon or a polygon with holes is its area-weighted centroid and
        may lie outside it.
        """
        tri_c = self.triangles.mean(axis=1)
        k = len(self.keys)
        cx = np.bincount(self.tri_owner, weights=tri_c[:, 0] * self.tri_area, minlength=k)
        cy = np.bincount(self.tri_owner, weights=tri_c[:, 1] * self.tri_area, minlength=k)
        return np.stack([cx, cy], axis=1) / self._poly_area[:, None]

    @property
    def draw_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(key, offsets, triangles)``: what :meth:`place` searches and places points in,
        for a draw elsewhere (:class:`hawkes_cli.engine.point_draw.DevicePointDraw`). ``key``
        (T,) is each triangle's polygon index plus its cumulative area share (so each
        polygon's keys lie in ``(k, k + 1]``); read-only arrays."""
        return self._search_key, self.offsets, self.triangles

    @staticmethod
    def code_order(codes: np.ndarray) -> np.ndarray:
        """A permutation that sorts ``codes`` (stable), for :meth:`sample`'s ``order``."""
        return np.argsort(np.asarray(codes), kind="stable")

    def sample(
        self, codes: np.ndarray, rng: np.random.Generator, order: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One uniform point inside each event's polygon.

        Consumes exactly ``rng.random((N, 3))`` and nothing else (see the module docstring), so a
        draw depends only on the generator's state, ``codes`` and the sampler.

        Parameters
        ----------
        codes : array_like of int, shape (N,)
            Polygon index of each event (from :meth:`codes`).
        rng
            The chain's generator.
        order : array_like of int, shape (N,), optional
            A permutation of the events, best one that sorts ``codes`` (:meth:`code_order`),
            for a caller that draws the same events again and again: the triangle search then
            runs county by county (0.15 s instead of 0.27 s at 1M). Any permutation gives the
            same points; one of another shape is ignored.

        Returns
        -------
        x, y : numpy.ndarray, shape (N,), float64
            Coordinates, coordinate units; the point of event ``n`` is uniform in polygon
            ``codes[n]`` (and within the bounding box of the triangle it was drawn in).

        Raises
        ------
        UsageError
            ``codes`` is not 1-D integers in ``[0, K)``.
        """
        c = np.asarray(codes)
        if c.ndim != 1 or (c.size and not np.issubdtype(c.dtype, np.integer)):
            raise UsageError(f"codes must be a 1-D integer array, got {c.dtype} {c.shape}")
        c = c.astype(np.int64, copy=False)
        if c.size and (c.min() < 0 or c.max() >= len(self.keys)):
            raise UsageError(f"codes must lie in [0, {len(self.keys)})")
        return self.place(c, rng.random((c.size, 3)), order)

    def place(
        self, codes: np.ndarray, r: np.ndarray, order: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The points :meth:`sample` draws for the uniforms ``r`` (shape (N, 3), in [0, 1):
        the triangle's, then two inside it), for valid int64 ``codes`` (shape (N,)) and
        ``order`` as there. The device draw (:mod:`hawkes_cli.engine.point_draw`) gives the
        same points from the same ``r`` and :attr:`draw_tables`."""
        c = codes
        # Triangle: first key > owner + r0 among this owner's keys (owner, owner + 1]; the clip
        # guards against owner + r0 rounding up to owner + 1 and so into the next owner.
        t = _searchsorted_right(self._search_key, c + r[:, 0], order)
        t = np.clip(t, self.offsets[c], self.offsets[c + 1] - 1)
        u, v = r[:, 1], r[:, 2]
        flip = u + v > 1.0
        u = np.where(flip, 1.0 - u, u)
        v = np.where(flip, 1.0 - v, v)
        tri = self.triangles[t]
        a, b, cc = tri[:, 0], tri[:, 1], tri[:, 2]
        p = a + u[:, None] * (b - a) + v[:, None] * (cc - a)
        # Rounding can push a point an ulp past its triangle; keep it within the triangle's box
        # (exact containment for boxes and grid cells).
        lo = np.minimum(np.minimum(a, b), cc)
        hi = np.maximum(np.maximum(a, b), cc)
        np.clip(p, lo, hi, out=p)
        return p[:, 0].copy(), p[:, 1].copy()


#: Above this many sorted keys (float64: 512 KiB, a typical L2 cache) random queries are sorted
#: first, which makes :func:`numpy.searchsorted` ~4x faster on the 1M-triangle county set.
_SORT_QUERIES_ABOVE = 1 << 16


def _searchsorted_right(
    keys: np.ndarray, queries: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """``numpy.searchsorted(keys, queries, side="right")``, sorting large random queries first
    (by ``order`` when given: a permutation that sorts their integer parts).

    The result is identical either way; sorting only improves memory locality.
    """
    if keys.size <= _SORT_QUERIES_ABOVE or queries.size < 1024:
        return np.searchsorted(keys, queries, side="right")
    if order is None or np.shape(order) != queries.shape:
        order = np.argsort(queries)
    out = np.empty(queries.size, dtype=np.int64)
    out[order] = np.searchsorted(keys, queries[order], side="right")
    return out
