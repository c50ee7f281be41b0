"""Trigger masses of events redrawn inside fixed boxes (their counties), planned once per level.

The per-event raster path of :class:`~hawkes_cli.engine.region.BoundaryRegion` decides anew,
for every location draw, which events are near the boundary and which raster tile serves each:
at 1,000,000 county-placed cases that is 0.4 s of one core per lattice level (a search of the
boundary's segment index and a sort of tile keys), twice per draw. Yet a redraw moves each
case only inside its county. Here the decisions are taken per county, from the county's box:

- a county is *near* at lengthscale ``s`` when a cell of the region's segment index (every
  segment within ``CUTOFF s``) overlaps its box; the cases of a county that is not near keep
  all their mass, wherever they are drawn;
- a near county's tile is the tile of its box's centre; a tile's raster covers the boxes of
  its counties widened by 6 lengthscales, so it serves every draw. A county wider than a tile
  (an island chain, the Aleutians across the date line) stays on the per-event path.

So a level's plan (which cases read which raster, which take the exact path) depends on the
counties only, and is kept; a draw then costs the raster reads alone, and only for the cases the
region's distance screen (:mod:`.region_screen`) finds within ``CUTOFF`` lengthscales of the
boundary: the others, most of a near county's cases, keep all their mass. The rasters are the
region's own (the same lattice, cells and read), so the masses are those of the per-event path
up to the raster's resolution (:data:`~hawkes_cli.engine.region.FIELD_ERROR`). Cases outside
their county's box (a file's own locations need not lie in their polygon) take the per-event
path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .region import (
    CUTOFF,
    FIELD_ERROR,
    FIELD_KAPPA,
    LATTICE_STEPS,
    MAX_FIELD_CELLS,
    TILE_LENGTHSCALES,
    BoundaryRegion,
)

#: Plans kept (lattice levels; a chain's sigma_x visits a few).
PLANS_KEPT = 16


@dataclass(frozen=True)
class EventGroups:
    """Events grouped by a fixed label (their county) and a box each group's locations lie in.

    Attributes
    ----------
    order : (N,) int64
        Event indices sorted by group.
    cuts : (G + 1,) int64
        Group g's events are ``order[cuts[g]:cuts[g + 1]]``.
    boxes : (G, 4) float64
        ``x0, x1, y0, y1`` of each group (coordinate units).
    group : (N,) int64
        Each event's group.
    """

    order: np.ndarray
    cuts: np.ndarray
    boxes: np.ndarray
    group: np.ndarray

    @classmethod
    def of_polygons(
        cls, triangles: np.ndarray, tri_owner: np.ndarray, codes: np.ndarray
    ) -> EventGroups:
        """Events grouped by their polygon ``codes`` (shape (N,), indices into the polygons
        of ``triangles`` (T, 3, 2) owned per ``tri_owner`` (T,)), each box its polygon's."""
        codes = np.asarray(codes, dtype=np.int64)
        owner = np.asarray(tri_owner, dtype=np.int64)
        tri = np.asarray(triangles, dtype=np.float64)
        used, group = np.unique(codes, return_inverse=True)
        boxes = np.empty((used.size, 4))
        boxes[:, [0, 2]] = np.inf
        boxes[:, [1, 3]] = -np.inf
        slot = np.full(int(max(owner.max(initial=-1), used.max(initial=-1))) + 1, -1)
        slot[used] = np.arange(used.size)
        mine = slot[owner] >= 0
        g = slot[owner[mine]]
        lo, hi = tri[mine].min(axis=1), tri[mine].max(axis=1)
        np.minimum.at(boxes[:, 0], g, lo[:, 0])
        np.maximum.at(boxes[:, 1], g, hi[:, 0])
        np.minimum.at(boxes[:, 2], g, lo[:, 1])
        np.maximum.at(boxes[:, 3], g, hi[:, 1])
        order = np.argsort(group, kind="stable")
        cuts = np.searchsorted(group[order], np.arange(used.size + 1))
        return cls(order, cuts, boxes, group)

    def inside(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether each event lies in its group's box, (N,) bool."""
        b = self.boxes[self.group]
        return (b[:, 0] <= x) & (x <= b[:, 1]) & (b[:, 2] <= y) & (y <= b[:, 3])

    def rows(self, groups: np.ndarray) -> np.ndarray:
        """The events of ``groups``, int64."""
        parts = [self.order[self.cuts[g] : self.cuts[g + 1]] for g in groups]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class TilePlan:
    """One lattice level's reads: per tile, its raster's tag and box and the events it serves;
    and the events the per-event path takes (those of counties wider than a tile)."""

    tiles: list[tuple[tuple[int, ...], tuple[float, float, float, float], np.ndarray]]
    per_event: np.ndarray


@dataclass
class GroupedMass:
    """Masses inside ``region`` of events that stay in their group's box (see module doc), all
    with one lengthscale (model 1).

    Parameters
    ----------
    region
        The study region (its segment indexes and rasters are used and kept there).
    groups
        The events' groups.

    Model 2's lengthscales differ per county, so its counties spread over many levels, each
    read between two rasters; planned per county, the rasters of neighbouring levels serve
    different sets of counties and would double the kept raster memory (150 million cells at
    1M cases). Model 2 keeps the per-event path.
    """

    region: BoundaryRegion
    groups: EventGroups
    _plans: dict[int, TilePlan] = field(default_factory=dict, init=False, repr=False)

    def mass_error(
        self, x: np.ndarray, y: np.ndarray, sigma_x: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of every event at ``sigma_x``, float64 shapes (N,), as
        :meth:`BoundaryRegion.mass_error` gives them (between the two lattice levels around
        ``sigma_x``, linearly in log s)."""
        n = self.groups.group.size
        out = np.ones(n)
        err = np.zeros(n)
        k, frac = self.level_of(sigma_x)
        plan = self.plan(k)
        # events farther than CUTOFF lengthscales (the upper level's) from the boundary keep
        # all their mass: one lookup each (:mod:`.region_screen`), no raster read
        reach = self.reach(k)
        screen = self.region.screen(x, y)
        for tag, box, tile_rows in plan.tiles:
            rows = tile_rows[~screen.far(x[tile_rows], y[tile_rows], reach)]
            if rows.size == 0:
                continue
            m = self.region.raster(k, tag, box, box).read(x[rows], y[rows])
            if frac > 0:  # the next level's raster of the same tile (its own tag)
                hi = self.region.raster(k + 1, (*tag, k), box, box).read(x[rows], y[rows])
                m = (1.0 - frac) * m + frac * hi
            m = np.clip(m, 0.0, 1.0)
            out[rows] = m
            err[rows] = np.where(m < 1.0, FIELD_ERROR, 0.0)
        if plan.per_event.size:
            rows = plan.per_event
            out[rows], err[rows] = self.region.mass_error(x[rows], y[rows], sigma_x)
        return out, err

    @staticmethod
    def level_of(sigma_x: float) -> tuple[int, float]:
        """``(k, frac)``: the raster level below ``sigma_x`` and the weight of the next one
        (0 at a lattice point, which reads one level)."""
        pos = LATTICE_STEPS * np.log2(float(sigma_x))
        k, frac = round(pos), 0.0
        if abs(pos - k) >= 1e-9:
            k = math.floor(pos)
            frac = pos - k
        return int(k), float(frac)

    @staticmethod
    def reach(k: int) -> float:
        """Distance (coordinate units) beyond which level ``k``'s events keep all their mass:
        ``CUTOFF`` lengthscales of the level above."""
        return CUTOFF * 2.0 ** ((k + 1) / LATTICE_STEPS)

    def plan(self, k: int) -> TilePlan:
        """The plan of level ``k`` (kept)."""
        hit = self._plans.pop(k, None)
        if hit is None:
            hit = self._make_plan(k)
        self._plans[k] = hit
        while len(self._plans) > PLANS_KEPT:
            del self._plans[next(iter(self._plans))]
        return hit

    def _make_plan(self, k: int) -> TilePlan:
        s_lo = 2.0 ** (k / LATTICE_STEPS)
        s_hi = s_lo * 2.0 ** (1.0 / LATTICE_STEPS)
        index = self.region.segment_index(s_hi)
        tile = TILE_LENGTHSCALES * s_lo
        near = np.array([index.box_near(box) for box in self.groups.boxes], dtype=bool)
        sides = np.diff(self.groups.boxes, axis=1)[:, [0, 2]]
        wide = np.any(sides > tile, axis=1)  # a county wider than a tile (an island chain)
        per_event = self.groups.rows(np.flatnonzero(near & wide))
        members = np.flatnonzero(near & ~wide)
        boxes = self.groups.boxes[members]
        tx = np.floor((boxes[:, 0] + boxes[:, 1]) / (2.0 * tile)).astype(np.int64)
        ty = np.floor((boxes[:, 2] + boxes[:, 3]) / (2.0 * tile)).astype(np.int64)
        margin = 6.0 * s_hi
        h = s_lo / FIELD_KAPPA
        tiles = []
        cells = 0.0
        for a, b in sorted(set(zip(tx.tolist(), ty.tolist(), strict=True))):
            mine = (tx == a) & (ty == b)
            box = (
                float(boxes[mine, 0].min() - margin),
                float(boxes[mine, 1].max() + margin),
                float(boxes[mine, 2].min() - margin),
                float(boxes[mine, 3].max() + margin),
            )
            cells += ((box[1] - box[0]) / h) * ((box[3] - box[2]) / h)
            tiles.append(((a, b, "groups"), box, self.groups.rows(members[mine])))
        if cells > MAX_FIELD_CELLS:  # too many cells: the per-event path for them all
            return TilePlan([], self.groups.rows(np.flatnonzero(near)))
        return TilePlan(tiles, per_event)
