"""The share of each event's trigger kernel that falls inside the study region.

The censored edge correction (``model.edge: censored``) counts in the compensator, for each
event m, only the trigger mass inside the study region R:

    M_m = integral over R of phi2(x - x_m; s_m) dx,      s_m = sigma_x (model 1) or
                                                        sigma_x / sqrt(D_m) (model 2),

so the trigger part of the compensator is ``xi0 * sum_m (1 - exp(-(T - t_m)/sigma_t)) * M_m``
instead of the same sum with ``M_m = 1`` (DESIGN section 2: the paper's likelihood,
``model.edge: none``).

Two kinds of region:

- :class:`RectangleRegion`: ``[x0, x1] x [y0, y1]`` (simulated data); the mass is the product of
  two normal-CDF differences, exact.
- :class:`BoundaryRegion`: any union of polygons given by its boundary segments, oriented with
  the region on their left (the union of a run's county polygons: the edges of its triangles
  that no other triangle shares). The mass follows from the divergence theorem in polar
  coordinates around the event: for a point c inside R,

      M(c) = 1 - sum over boundary segments e of G_e,
      G_e  = sgn_e / (2 pi) * integral over the segment of exp(-r^2 / (2 s^2)) dphi,

  ``r`` the distance from c and ``phi`` the angle the segment sweeps as seen from c (``sgn_e``
  +1 when c is on the segment's left). Along the segment, at perpendicular distance ``h`` and
  along-line coordinate ``tau`` from the foot of the perpendicular, ``dphi = |h| dtau / q`` with
  ``q = h^2 + tau^2``; splitting ``exp(-q/2s^2) = 1 + expm1(-q/2s^2)`` gives

      2 pi |G_e| = [atan(tau/|h|)]_a^b + |h| * integral_a^b expm1(-q / (2 s^2)) / q dtau,

  the first part exact, the second an *entire* function of ``tau`` (no pole, however close the
  segment passes), integrated by Gauss-Legendre on pieces at most ``s`` long (relative error
  below 1e-9, tested against Owen's T). Segments farther than ``CUTOFF`` lengthscales from c
  contribute below ``exp(-CUTOFF^2 / 2)`` times their swept angle and are skipped (the part of
  a near segment beyond that distance is clipped off the same way). A point outside R (it can
  only be near the boundary, since events lie in their counties) shows up as ``1 + M``, which
  is folded back to ``M``.

The per-event cost of that exact path is proportional to the boundary segments within
``CUTOFF * s_m`` of the event (~100 near the US coast at 0.046 degrees); events farther from the
boundary take ``M = 1`` after a cell lookup. Where it pays (:meth:`BoundaryRegion.mass_error`),
the *raster path* reads the mass instead from a raster of the region's exact area coverage
blurred by the Gaussian (``FIELD_KAPPA`` cells per lengthscale), one per level of a lattice of
lengthscales ``2^(k/16)`` (interpolated linearly in log s) and per tile of events, built once
and kept: at 200,000 US events its mean absolute error against the exact path is ~5e-5.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr

from .keysort import group_keys
from .raster import FIELD_KAPPA, Field
from .region_screen import DistanceScreen, kept_screen
from .segment_bands import SegmentBands

log = logging.getLogger(__name__)

#: Segments farther than this many lengthscales from an event are skipped: each would contribute
#: at most exp(-CUTOFF^2 / 2) ~ 1.3e-14 times its swept angle over 2 pi.
CUTOFF = 8.0
#: Gauss-Legendre nodes per piece of a segment (pieces at most one lengthscale long).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(6)
#: Events handled per block (bounds the (event, segment) pair arrays to ~ tens of MB).
_BLOCK_PAIRS = 4_000_000
#: The raster path: lengthscales on a lattice of 2^(1/LATTICE_STEPS) steps, the mass between two
#: levels interpolated linearly in log s (error below ~1e-4: |d^2 M / d(log s)^2| < 0.35 for a
#: straight boundary, times step^2 / 8).
LATTICE_STEPS = 16
#: Most raster cells one lattice level may need over its tiles; events whose lengthscale would
#: need more take the exact path (their cost there falls with the square of the lengthscale).
#: The lower 48 states need 11 million at 0.046 degrees.
MAX_FIELD_CELLS = 30_000_000
#: Side of a raster tile, in lengthscales (events in one tile share a raster). 64, not 512: a
#: lattice level of model 2 holds the counties of one density band, scattered over the country,
#: whose tiles of 512 lengthscales made rasters of half the country per level (1M events, county
#: densities: 100 s per location redraw against 1.5 s; model 1's redraws 2.3 s against 0.95).
TILE_LENGTHSCALES = 64
#: Raster cells kept (three float32 layers each: 12 bytes a cell, 1.8 GB at most). Model 2 at
#: 1M events with real county densities keeps 90 million for its two lattice levels; with 60
#: million it rebuilt rasters at every redraw (25-50 s each instead of 1.5 s).
FIELD_CACHE_CELLS = 150_000_000
#: A new raster reaches this share of its tile's side beyond its events' box (within the tile):
#: after a location redraw most events stay inside the rasters already built.
FIELD_SLACK = 0.125
#: Seconds per raster cell built and per (event, segment) candidate of the exact path, measured
#: on one core of an AMD EPYC (Zen 5); only their ratio matters: a level's rasters are built
#: when that costs less than RASTER_REUSE exact evaluations of its events (a chain reuses a
#: level's rasters at every location redraw and sigma_x move that stays inside it). A cell
#: costs 1e-7 s blurred on its own and 4.7e-7 s since the coverage is blurred first on cells
#: three times finer (``raster.FIELD_SUPERSAMPLE``; a 92,720-cell tile on the Gulf coast).
COST_CELL = 4.7e-7
COST_CANDIDATE = 3.5e-7
RASTER_REUSE = 8
#: The error scale of one event's mass on the raster path, from the comparison with the exact
#: path (200,000 events as the paper places them in the lower 48 states, sigma_x = 0.046
#: degrees: mean absolute error 4.8e-5 over the events that lose mass, largest 8.7e-4; on a
#: rectangle up to 5e-4 and 2e-3, its corners being the raster's worst case; measured before
#: the coverage was blurred on finer cells, which took a straight edge's bias from 4.5e-4 to
#: 6e-6, ``tests/test_raster.py``); used for the reported error term of the likelihood, an
#: estimate and not a bound.
FIELD_ERROR = 5e-4
#: The error of one event's mass on the exact path (Gauss-Legendre, clipping).
EXACT_ERROR = 1e-9


@dataclass(frozen=True)
class RectangleRegion:
    """The rectangle ``[x0, x1] x [y0, y1]`` (coordinate units)."""

    bounds: tuple[float, float, float, float]

    @property
    def area(self) -> float:
        """Area, coordinate units squared."""
        x0, x1, y0, y1 = self.bounds
        return (x1 - x0) * (y1 - y0)

    @property
    def describe(self) -> str:
        """One line for logs and reports."""
        x0, x1, y0, y1 = self.bounds
        return f"rectangle [{x0:g}, {x1:g}] x [{y0:g}, {y1:g}]"

    def mass(self, x: np.ndarray, y: np.ndarray, s: np.ndarray | float) -> np.ndarray:
        """Trigger mass inside the rectangle of each event, float64 shape (N,), in [0, 1].

        Parameters
        ----------
        x, y : (N,) float64
            Event locations (coordinate units).
        s : float or (N,) float64
            Each event's trigger lengthscale (coordinate units, > 0).
        """
        x0, x1, y0, y1 = self.bounds
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        s = np.asarray(s, dtype=np.float64)
        mx = ndtr((x1 - x) / s) - ndtr((x0 - x) / s)
        my = ndtr((y1 - y) / s) - ndtr((y0 - y) / s)
        return mx * my


@dataclass(frozen=True)
class _SegmentIndex:
    """Boundary segments listed per square cell of side ``cell`` (only the cells that list
    any); a segment is listed in every cell within ``reach`` of its bounding box, so an event
    finds every segment within ``reach`` in its own cell."""

    reach: float
    cell: float
    keys: np.ndarray  # (C,) int64, sorted cell keys that list segments
    start: np.ndarray  # (C + 1,) int64, CSR offsets into ``segment``
    segment: np.ndarray  # (entries,) int64

    #: cell keys are ``cy * _WIDE + cx`` with cells counted from -_WIDE / 2 in each axis
    _WIDE = 2**31

    @classmethod
    def build(cls, p: np.ndarray, q: np.ndarray, reach: float) -> _SegmentIndex:
        cell = reach / 2.0
        c0 = np.floor((np.minimum(p, q) - reach) / cell).astype(np.int64)
        c1 = np.floor((np.maximum(p, q) + reach) / cell).astype(np.int64)
        wide = c1[:, 0] - c0[:, 0] + 1
        count = wide * (c1[:, 1] - c0[:, 1] + 1)
        seg = np.repeat(np.arange(p.shape[0], dtype=np.int64), count)
        k = np.arange(seg.size, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        cells = cls._key(c0[seg, 0] + k % wide[seg], c0[seg, 1] + k // wide[seg])
        order = np.argsort(cells, kind="stable")
        keys, first = np.unique(cells[order], return_index=True)
        start = np.concatenate([first, [seg.size]]).astype(np.int64)
        return cls(reach, cell, keys, start, seg[order])

    @classmethod
    def _key(cls, cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
        half = cls._WIDE // 2
        return (cy + half) * cls._WIDE + (cx + half)

    def cells_of(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Index into :attr:`keys` of each point's cell, (N,) int64; -1 where the cell lists
        no segment (none is near)."""
        key = self._key(
            np.floor(x / self.cell).astype(np.int64), np.floor(y / self.cell).astype(np.int64)
        )
        at = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return np.where(self.keys[at] == key, at, -1)

    def box_near(self, box: np.ndarray, most: int = 4096) -> bool:
        """Whether a segment may lie within ``reach`` of the box ``x0, x1, y0, y1``: a cell
        overlapping it lists one (True, unsearched, when it overlaps more than ``most``)."""
        x0, x1 = np.floor(np.asarray(box[:2]) / self.cell).astype(np.int64)
        y0, y1 = np.floor(np.asarray(box[2:]) / self.cell).astype(np.int64)
        if (x1 - x0 + 1) * (y1 - y0 + 1) > most:
            return True
        cx, cy = np.meshgrid(np.arange(x0, x1 + 1), np.arange(y0, y1 + 1))
        key = self._key(cx.ravel(), cy.ravel())
        at = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return bool(np.any(self.keys[at] == key))


@dataclass(frozen=True)
class BoundaryRegion:
    """A region given by its boundary segments (region on each segment's left).

    Parameters
    ----------
    start, end : (S, 2) float64
        Segment endpoints, coordinate units.
    area : float
        The region's area (coordinate units squared), for reports.
    label : str
        What the region is (for logs and reports).
    """

    start: np.ndarray
    end: np.ndarray
    area: float
    label: str = "polygons"
    _indexes: dict[int, _SegmentIndex] = field(default_factory=dict, init=False, repr=False)
    _fields: dict[tuple[int, ...], Field] = field(default_factory=dict, init=False, repr=False)
    # cells of the kept rasters (a one-element list: the caches are mutable, the region not)
    _kept_cells: list[int] = field(default_factory=lambda: [0], init=False, repr=False)
    _screen: list[DistanceScreen] = field(default_factory=list, init=False, repr=False)
    _bands: list[SegmentBands] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        p = np.ascontiguousarray(self.start, dtype=np.float64)
        q = np.ascontiguousarray(self.end, dtype=np.float64)
        if p.shape != q.shape or p.ndim != 2 or p.shape[1] != 2 or p.shape[0] == 0:
            raise ValueError(f"segments must be two (S, 2) arrays, got {p.shape} and {q.shape}")
        keep = np.any(p != q, axis=1)
        p, q = p[keep], q[keep]
        p.setflags(write=False)
        q.setflags(write=False)
        object.__setattr__(self, "start", p)
        object.__setattr__(self, "end", q)

    @classmethod
    def from_triangles(
        cls, triangles: np.ndarray, *, area: float | None = None, label: str = "polygons"
    ) -> BoundaryRegion:
        """The boundary of a union of triangles: their edges that no other triangle shares
        (with the same endpoints, in the opposite direction), oriented counter-clockwise.

        Parameters
        ----------
        triangles : (T, 3, 2) float64
            Triangles that do not overlap (a county layer's triangulation).
        """
        tri = np.asarray(triangles, dtype=np.float64)
        a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
        cross = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (
            c[:, 0] - a[:, 0]
        )
        ccw = np.where((cross < 0)[:, None, None], tri[:, ::-1], tri)
        p = ccw.reshape(-1, 2)
        q = np.roll(ccw, -1, axis=1).reshape(-1, 2)
        # an edge two triangles share appears once in each direction: sort the undirected
        # edges (lower endpoint first) and drop every key that occurs twice
        swap = (p[:, 0] > q[:, 0]) | ((p[:, 0] == q[:, 0]) & (p[:, 1] > q[:, 1]))
        lo = np.where(swap[:, None], q, p)
        hi = np.where(swap[:, None], p, q)
        order = np.lexsort((hi[:, 1], hi[:, 0], lo[:, 1], lo[:, 0]))
        key = np.hstack([lo, hi])[order]
        same = np.all(key[1:] == key[:-1], axis=1)
        shared = np.zeros(order.size, dtype=bool)
        shared[1:] |= same
        shared[:-1] |= same
        boundary = np.zeros(order.size, dtype=bool)
        boundary[order] = ~shared
        total = float(np.sum(np.abs(cross)) / 2.0) if area is None else float(area)
        return cls(p[boundary], q[boundary], total, label)

    @property
    def describe(self) -> str:
        """One line for logs and reports."""
        return f"{self.label} ({self.start.shape[0]:,} boundary segments)"

    def segment_index(self, s: float) -> _SegmentIndex:
        """The segment index whose reach covers ``CUTOFF * s`` (levels by powers of two)."""
        level = math.ceil(math.log2(CUTOFF * s))
        index = self._indexes.get(level)
        if index is None:
            index = _SegmentIndex.build(self.start, self.end, 2.0**level)
            self._indexes[level] = index
        return index

    def mass(self, x: np.ndarray, y: np.ndarray, s: np.ndarray | float) -> np.ndarray:
        """Trigger mass inside the region of each event, float64 shape (N,), in [0, 1].

        Parameters
        ----------
        x, y : (N,) float64
            Event locations (coordinate units); an event far (over ``CUTOFF`` lengthscales)
            from the boundary is taken to be inside.
        s : float or (N,) float64
            Each event's trigger lengthscale (coordinate units, > 0).
        """
        return self.mass_error(x, y, s)[0]

    def mass_error(
        self, x: np.ndarray, y: np.ndarray, s: np.ndarray | float, *, exact: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of each event, float64 shapes (N,).

        Events whose lengthscale allows a raster of at most ``MAX_FIELD_CELLS`` cells over
        their bounding box take the raster path (a Gaussian-blurred coverage raster per
        lattice level, read bilinearly, interpolated in log s); the others, or all with
        ``exact``, the exact path. The error scale is ``FIELD_ERROR`` or ``EXACT_ERROR`` for
        events near the boundary (mass below 1), 0 elsewhere.
        """
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        s = np.broadcast_to(np.asarray(s, dtype=np.float64), x.shape)
        out = np.ones(x.shape, dtype=np.float64)
        err = np.zeros(x.shape, dtype=np.float64)
        if x.size == 0:
            return out, err
        # events CUTOFF lengthscales from the boundary (at the raster's upper level) keep all
        # their mass: only the others take either path
        reach = CUTOFF * s * 2.0 ** (1 / LATTICE_STEPS)
        near = np.flatnonzero(~self.screen(x, y).far(x, y, reach))
        if near.size == 0:
            return out, err
        x, y, s = x[near], y[near], s[near]
        m, e = np.ones(near.size), np.zeros(near.size)
        exact_rows = np.arange(near.size) if exact else self._raster_mass(x, y, s, m, e)
        if exact_rows.size:
            m[exact_rows] = self.exact_mass(x[exact_rows], y[exact_rows], s[exact_rows])
            e[exact_rows] = np.where(m[exact_rows] < 1.0, EXACT_ERROR, 0.0)
        out[near], err[near] = m, e
        return out, err

    def screen(self, x: np.ndarray, y: np.ndarray) -> DistanceScreen:
        """The distance screen of the boundary for the points ``x``, ``y`` (kept; see
        :func:`.region_screen.kept_screen`)."""
        return kept_screen(self._screen, self.start, self.end, x, y)

    def _raster_mass(
        self, x: np.ndarray, y: np.ndarray, s: np.ndarray, out: np.ndarray, err: np.ndarray
    ) -> np.ndarray:
        """Fill ``out``/``err`` for the events the raster path can take; return the others.

        The events of a lattice level are grouped into square tiles of ``TILE_LENGTHSCALES``
        lengthscales, each served by rasters over its own events' box (so events far apart,
        such as Alaska's and Florida's, do not make one huge raster); a level whose tiles need
        more than ``MAX_FIELD_CELLS`` cells in all takes the exact path.
        """
        pos = LATTICE_STEPS * np.log2(s)
        snap = np.abs(pos - np.rint(pos)) < 1e-9  # lattice points read one level, not two
        pos = np.where(snap, np.rint(pos), pos)
        level = np.floor(pos).astype(np.int64)
        frac = pos - level
        rest = []
        # the rows of each level in ascending order, by one radix sort (model 2's lengthscales
        # span a hundred levels: a comparison over all rows per level cost 0.13 s at 1M)
        levels, _, counts, by_level = group_keys(level)
        for k, rows in zip(levels, np.split(by_level, np.cumsum(counts)[:-1]), strict=True):
            s_lo = 2.0 ** (k / LATTICE_STEPS)
            # events with no boundary segment within CUTOFF lengthscales keep all their mass
            near = self.segment_index(s_lo * 2.0 ** (1.0 / LATTICE_STEPS)).cells_of(
                x[rows], y[rows]
            )
            rows = rows[near >= 0]
            if rows.size == 0:
                continue
            margin = 6.0 * s_lo * 2.0 ** (1.0 / LATTICE_STEPS)
            tile = TILE_LENGTHSCALES * s_lo
            tx = np.floor(x[rows] / tile).astype(np.int64)
            ty = np.floor(y[rows] / tile).astype(np.int64)
            keys, group = np.unique(square_key(tx, ty), return_inverse=True)
            keys = np.stack(square_of(keys), axis=1)
            order = np.argsort(group, kind="stable")
            cuts = np.searchsorted(group[order], np.arange(keys.shape[0] + 1))
            parts = [rows[order[cuts[g] : cuts[g + 1]]] for g in range(keys.shape[0])]
            boxes = [_bbox(x[part], y[part], margin) for part in parts]
            cells = sum(_cells(box, s_lo / FIELD_KAPPA) for box in boxes)
            if cells > MAX_FIELD_CELLS or not self._raster_pays(k, keys, x, y, s, rows, cells):
                rest.append(rows)
                continue
            for key, part, box in zip(keys, parts, boxes, strict=True):
                tag = (int(k), int(key[0]), int(key[1]))
                # a raster may grow to the tile (and its margin), never beyond
                limit = (
                    key[0] * tile - margin,
                    (key[0] + 1) * tile + margin,
                    key[1] * tile - margin,
                    (key[1] + 1) * tile + margin,
                )
                m = self.raster(int(k), tag, box, limit).read(x[part], y[part])
                if np.any(frac[part] > 0):
                    hi = self.raster(int(k) + 1, tag, box, limit).read(x[part], y[part])
                    m = (1.0 - frac[part]) * m + frac[part] * hi
                m = np.clip(m, 0.0, 1.0)
                out[part] = m
                err[part] = np.where(m < 1.0, FIELD_ERROR, 0.0)
        return np.concatenate(rest) if rest else np.empty(0, dtype=np.int64)

    def _raster_pays(
        self,
        k: int,
        keys: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        s: np.ndarray,
        rows: np.ndarray,
        cells: float,
    ) -> bool:
        """Whether the rasters of level ``k`` are cheaper than the exact path for ``rows``:
        always when they are kept already; else when building them (``cells`` per level, two
        levels) costs less than ``RASTER_REUSE`` exact evaluations (segment candidates)."""
        kept = all((k, k, int(a), int(b)) in self._fields for a, b in keys)
        if kept:
            return True
        index = self.segment_index(float(np.max(s[rows])))
        found = index.cells_of(x[rows], y[rows])
        found = found[found >= 0]
        candidates = float(np.sum(index.start[found + 1] - index.start[found]))
        return 2.0 * cells * COST_CELL < RASTER_REUSE * candidates * COST_CANDIDATE

    def raster(
        self,
        k: int,
        tile: tuple[int, int, int],
        box: tuple[float, float, float, float],
        limit: tuple[float, float, float, float],
    ) -> Field:
        """The raster of lattice level ``k`` for ``tile`` covering ``box`` (cached; the least
        recently used go once the kept rasters exceed ``FIELD_CACHE_CELLS``). A new raster
        covers ``box`` widened by ``FIELD_SLACK`` of the tile's side (within ``limit``, the
        tile and its margin), and one that no longer covers its events grows to the union of
        both boxes, widened alike: events redrawn in their counties then mostly stay inside
        the rasters already built."""
        key = (k, *tile)
        got = self._fields.pop(key, None)
        if got is not None:
            self._kept_cells[0] -= got.values[0].size
        if got is None or not got.covers(box):
            box = self._new_box(got, box, limit)
            near = self._segments_near(k, box)
            got = Field.build(self.start[near], self.end[near], _lengthscale(k), box)
        self._fields[key] = got  # most recently used last
        self._kept_cells[0] += got.values[0].size
        while len(self._fields) > 2 and self._kept_cells[0] > FIELD_CACHE_CELLS:
            self._kept_cells[0] -= self._fields.pop(next(iter(self._fields))).values[0].size
        return got

    @staticmethod
    def _new_box(
        got: Field | None, box: tuple[float, float, float, float], limit: tuple[float, ...]
    ) -> tuple[float, float, float, float]:
        """The box a new raster for ``box`` gets (:meth:`raster`), ``got`` the one it replaces."""
        if got is not None:  # grow it to the union of both boxes
            b = got.box
            box = (min(box[0], b[0]), max(box[1], b[1]), min(box[2], b[2]), max(box[3], b[3]))
        pad = FIELD_SLACK * (limit[1] - limit[0])
        return (
            max(box[0] - pad, limit[0]),
            min(box[1] + pad, limit[1]),
            max(box[2] - pad, limit[2]),
            min(box[3] + pad, limit[3]),
        )

    def _segments_near(self, k: int, box: tuple[float, float, float, float]) -> np.ndarray:
        """The segments that may reach the rows of a level-``k`` raster over ``box`` (4 cells'
        margin: :mod:`.segment_bands`)."""
        if not self._bands:
            self._bands.append(SegmentBands.build(self.start, self.end))
        s = _lengthscale(k)
        return self._bands[0].reaching(box[1] + s, box[2] - s, box[3] + s)

    def exact_mass(self, x: np.ndarray, y: np.ndarray, s: np.ndarray) -> np.ndarray:
        """The exact path: the segment sum of the module docstring for every event."""
        out = np.ones(x.shape, dtype=np.float64)
        levels = np.ceil(np.log2(CUTOFF * s)).astype(np.int64)
        for level in np.unique(levels):
            which = np.flatnonzero(levels == level)
            index = self.segment_index(2.0**level / CUTOFF)
            cells = index.cells_of(x[which], y[which])
            inside = cells >= 0
            which, cells = which[inside], cells[inside]
            n = index.start[cells + 1] - index.start[cells]
            which, cells, n = which[n > 0], cells[n > 0], n[n > 0]
            bounds = np.concatenate([[0], np.cumsum(n)])
            # blocks of events with at most _BLOCK_PAIRS candidate pairs
            cuts = np.searchsorted(bounds, np.arange(0, bounds[-1], _BLOCK_PAIRS), side="right")
            edges = np.unique(np.concatenate([cuts - 1, [n.size]]))
            for i0, i1 in itertools.pairwise(edges):
                if i1 > i0:
                    sel = slice(i0, i1)
                    out[which[sel]] = self._mass_near(x, y, s, which[sel], cells[sel], index)
        return out

    def _mass_near(
        self,
        x: np.ndarray,
        y: np.ndarray,
        s: np.ndarray,
        which: np.ndarray,
        cells: np.ndarray,
        index: _SegmentIndex,
    ) -> np.ndarray:
        """The mass of events ``which`` (each with candidate segments in its cell)."""
        n = index.start[cells + 1] - index.start[cells]
        local = np.repeat(np.arange(which.size), n)
        pos = np.arange(local.size) - np.repeat(np.cumsum(n) - n, n) + index.start[cells][local]
        seg = index.segment[pos]
        ev = which[local]
        p, q = self.start[seg], self.end[seg]
        ex, ey = q[:, 0] - p[:, 0], q[:, 1] - p[:, 1]
        length = np.hypot(ex, ey)
        ex /= length
        ey /= length
        ux, uy = p[:, 0] - x[ev], p[:, 1] - y[ev]
        a = ux * ex + uy * ey  # along-line coordinate of the start, from the foot
        h = ux * ey - uy * ex  # > 0: the event is on the segment's left (inside side)
        se = s[ev]
        reach = CUTOFF * se
        # clip the segment to |tau| <= sqrt(reach^2 - h^2) (beyond: below exp(-CUTOFF^2/2))
        half = np.sqrt(np.maximum(reach * reach - h * h, 0.0))
        lo = np.maximum(a, -half)
        hi = np.minimum(a + length, half)
        near = hi > lo
        local, h, lo, hi, se = local[near], h[near], lo[near], hi[near], se[near]
        ah = np.abs(h)
        angle = np.arctan2(hi, ah) - np.arctan2(lo, ah)
        # the entire part, Gauss-Legendre on pieces at most one lengthscale long
        pieces = np.maximum(np.ceil((hi - lo) / se), 1.0).astype(np.int64)
        pair = np.repeat(np.arange(pieces.size), pieces)
        k = np.arange(pair.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        width = (hi - lo)[pair] / pieces[pair]
        left = lo[pair] + k * width
        half_w = 0.5 * width
        mid = left + half_w
        inv2s2 = 0.5 / (se[pair] * se[pair])
        acc = np.zeros(pair.size)
        for node, weight in zip(_GL_NODES, _GL_WEIGHTS, strict=True):
            tau = mid + half_w * node
            qq = h[pair] * h[pair] + tau * tau
            z = qq * inv2s2
            safe = np.where(z > 0, z, 1.0)
            ratio = np.where(z > 0, np.expm1(-safe) / safe, -1.0)  # expm1(-z)/z, -> -1 at 0
            acc += weight * ratio
        entire = np.bincount(pair, weights=acc * half_w * inv2s2, minlength=pieces.size)
        g = (angle + ah * entire) / (2.0 * math.pi)
        g = np.where(h > 0, g, -g)
        m = 1.0 - np.bincount(local, weights=g, minlength=which.size)
        # a point outside the region reads 1 + M (its winding number is 0, not 1)
        return np.where(m > 1.0 + 1e-9, m - 1.0, np.clip(m, 0.0, 1.0))


def _lengthscale(k: int) -> float:
    """The lengthscale of raster lattice level ``k`` (coordinate units)."""
    return 2.0 ** (k / LATTICE_STEPS)


def _bbox(x: np.ndarray, y: np.ndarray, margin: float) -> tuple[float, float, float, float]:
    """``(x0, x1, y0, y1)`` of the points, widened by ``margin`` on every side."""
    return (
        float(x.min() - margin),
        float(x.max() + margin),
        float(y.min() - margin),
        float(y.max() + margin),
    )


def _cells(box: tuple[float, float, float, float], h: float) -> float:
    """Raster cells of side ``h`` over ``box``."""
    return math.ceil((box[1] - box[0]) / h) * math.ceil((box[3] - box[2]) / h)


Region = RectangleRegion | BoundaryRegion


def square_key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 key per tile square ``(a, b)`` (either may be negative); :func:`square_of`."""
    return np.asarray(a, dtype=np.int64) * 2**32 + (np.asarray(b, dtype=np.int64) + 2**31)


def square_of(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tile square ``(a, b)`` of each :func:`square_key`."""
    return key >> 32, (key & (2**32 - 1)) - 2**31
