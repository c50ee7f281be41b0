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
  (an island chain, the Aleutians across the date line, a western county) is planned as the
  tile squares its triangles' boxes touch, each with a raster over the square widened alike;
  each of its cases reads the square it was drawn in (:meth:`TilePlan.assign`, per draw).

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

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from .raster import FIELD_KAPPA
from .region import (
    CUTOFF,
    FIELD_ERROR,
    LATTICE_STEPS,
    MAX_FIELD_CELLS,
    TILE_LENGTHSCALES,
    BoundaryRegion,
    square_key,
    square_of,
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
    tri_boxes : (T, 4) float64 or None
        ``x0, x1, y0, y1`` of the groups' polygon triangles, group by group (None: not
        known; a county wider than a tile then takes the per-event path).
    tri_cuts : (G + 1,) int64 or None
        Group g's triangles are ``tri_boxes[tri_cuts[g]:tri_cuts[g + 1]]``.
    """

    order: np.ndarray
    cuts: np.ndarray
    boxes: np.ndarray
    group: np.ndarray
    tri_boxes: np.ndarray | None = None
    tri_cuts: np.ndarray | None = None

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
        by_group = np.argsort(g, kind="stable")
        tri_boxes = np.stack([lo[:, 0], hi[:, 0], lo[:, 1], hi[:, 1]], axis=1)[by_group]
        tri_cuts = np.searchsorted(g[by_group], np.arange(used.size + 1))
        return cls(order, cuts, boxes, group, tri_boxes, tri_cuts)

    def squares(self, groups: np.ndarray, side: float) -> np.ndarray:
        """Keys (:func:`square_key`, sorted, unique) of the squares of ``side`` (``[a side,
        (a + 1) side) x [b side, (b + 1) side)``) that the triangles of ``groups`` touch:
        every point of those polygons lies in one of them."""
        assert self.tri_boxes is not None and self.tri_cuts is not None
        parts = [np.arange(self.tri_cuts[g], self.tri_cuts[g + 1]) for g in groups]
        b = self.tri_boxes[np.concatenate(parts) if parts else np.empty(0, np.int64)]
        a0, a1 = (np.floor(b[:, :2] / side).astype(np.int64)).T
        b0, b1 = (np.floor(b[:, 2:] / side).astype(np.int64)).T
        ny = b1 - b0 + 1
        count = (a1 - a0 + 1) * ny
        tri = np.repeat(np.arange(count.size), count)
        k = np.arange(tri.size) - np.repeat(np.cumsum(count) - count, count)
        return np.unique(square_key(a0[tri] + k // ny[tri], b0[tri] + k % ny[tri]))

    @cached_property
    def row_boxes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``x0, x1, y0, y1`` of each event's group's box, four (N,) float64 arrays (made once:
        :meth:`inside` runs at every location draw, and four gathers of (N,) took 5 ms of its
        8 at 1M)."""
        x0, x1, y0, y1 = (np.take(c, self.group) for c in np.ascontiguousarray(self.boxes.T))
        return x0, x1, y0, y1

    def inside(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether each event lies in its group's box, (N,) bool."""
        x0, x1, y0, y1 = self.row_boxes
        inside = x0 <= x
        inside &= x <= x1
        inside &= y0 <= y
        inside &= y <= y1
        return inside

    def rows(self, groups: np.ndarray) -> np.ndarray:
        """The events of ``groups``, int64."""
        parts = [self.order[self.cuts[g] : self.cuts[g + 1]] for g in groups]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class WideRows:
    """The cases of one level's counties wider than a tile: each reads the tile of the
    square it is drawn in.

    Attributes
    ----------
    rows : (R,) int64
        The events.
    side : float
        The squares' side (coordinate units): the level's tile.
    keys : (S,) int64
        The squares their counties' triangles touch (:func:`square_key`, sorted).
    tile : (S,) int64
        Each square's tile in the plan, or -1 where no boundary is near (all mass kept).
    """

    rows: np.ndarray
    side: float
    keys: np.ndarray
    tile: np.ndarray


@dataclass(frozen=True)
class PlanTile:
    """One raster tile of a level's plan.

    Attributes
    ----------
    level : int
        The raster lattice level (lengthscale ``2^(level / LATTICE_STEPS)``).
    tag : tuple
        The raster's tag within its level (the next level's raster of the tile: ``(*tag,
        level)``).
    box : (4,) tuple of float
        ``x0, x1, y0, y1`` its rasters cover (coordinate units).
    rows : (R,) int64
        The events it serves.
    """

    level: int
    tag: tuple[object, ...]
    box: tuple[float, float, float, float]
    rows: np.ndarray


@dataclass(frozen=True)
class TilePlan:
    """The reads of one set of group levels: the tiles, and the events the per-event path
    takes (those of counties wider than a tile, or of a level whose rasters would be too
    large)."""

    tiles: list[PlanTile]
    per_event: np.ndarray
    wide: tuple[WideRows, ...] = ()

    def assign(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The wide counties' cases at these locations (of all (N,) events): ``(rows, tile,
        missing)``, the rows in a known square and each one's tile (-1: none near), and the
        rows in no square of their level (a file's own locations outside their polygon),
        which take the per-event path."""
        rows, tiles, missing = [], [], []
        for w in self.wide:
            key = square_key(np.floor(x[w.rows] / w.side), np.floor(y[w.rows] / w.side))
            at = np.minimum(np.searchsorted(w.keys, key), w.keys.size - 1)
            known = w.keys[at] == key
            rows.append(w.rows[known])
            tiles.append(w.tile[at[known]])
            missing.append(w.rows[~known])
        if not rows:
            empty = np.empty(0, np.int64)
            return empty, empty, empty
        return np.concatenate(rows), np.concatenate(tiles), np.concatenate(missing)


@dataclass
class GroupedMass:
    """Masses inside ``region`` of events that stay in their group's box (see module doc).

    Parameters
    ----------
    region
        The study region (its segment indexes and rasters are used and kept there).
    groups
        The events' groups.
    factors : (G,) float64 or None
        Each group's lengthscale per unit ``sigma_x`` (model 2: ``1 / sqrt(D)`` of its
        county); None: 1 (model 1, one lengthscale).

    Model 2's counties spread over many levels (a hundred at 1M cases), each county read
    between the rasters of the two levels around its own lengthscale (one, where the factors
    are snapped to the lattice as :class:`~.edge_mass.EdgeMass` gives them). As ``sigma_x``
    moves by a lattice step, other counties come to each level: each set of a tile's counties
    has its own rasters (a chain keeps a set per lattice point), so a raster depends on its box
    alone and a resumed chain reads the rasters an uninterrupted one reads.
    """

    region: BoundaryRegion
    groups: EventGroups
    factors: np.ndarray | None = None
    _plans: dict[bytes, TilePlan] = field(default_factory=dict, init=False, repr=False)

    def mass_error(
        self, x: np.ndarray, y: np.ndarray, sigma_x: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of every event at ``sigma_x``, float64 shapes (N,), as
        :meth:`BoundaryRegion.mass_error` gives them (between the two lattice levels around
        each lengthscale, linearly in log s)."""
        n = self.groups.group.size
        out = np.ones(n)
        err = np.zeros(n)
        level, frac = self.levels(sigma_x)
        plan = self.plan(level)
        row_frac = frac[self.groups.group]
        # events farther than CUTOFF lengthscales (the upper level's) from the boundary keep
        # all their mass: one lookup each (:mod:`.region_screen`), no raster read
        screen = self.region.screen(x, y)
        wide_rows, wide_tile, missing = plan.assign(x, y)
        order = np.argsort(wide_tile, kind="stable")
        by_tile = wide_rows[order]
        cuts = np.searchsorted(wide_tile[order], np.arange(len(plan.tiles) + 1))
        for i, t in enumerate(plan.tiles):
            mine = np.concatenate([t.rows, by_tile[cuts[i] : cuts[i + 1]]])
            rows = mine[~screen.far(x[mine], y[mine], self.reach(t.level))]
            if rows.size == 0:
                continue
            m = self.region.raster(t.level, t.tag, t.box, t.box).read(x[rows], y[rows])
            f = row_frac[rows]
            if np.any(f > 0):  # the next level's raster of the same tile (its own tag)
                hi = self.region.raster(t.level + 1, (*t.tag, t.level), t.box, t.box)
                m = (1.0 - f) * m + f * hi.read(x[rows], y[rows])
            m = np.clip(m, 0.0, 1.0)
            out[rows] = m
            err[rows] = np.where(m < 1.0, FIELD_ERROR, 0.0)
        rows = np.concatenate([plan.per_event, missing])
        if rows.size:
            out[rows], err[rows] = self.per_event(x, y, sigma_x, rows)
        return out, err

    def per_event(
        self, x: np.ndarray, y: np.ndarray, sigma_x: float, rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mass, error scale) of ``rows`` (of the (N,) ``x``, ``y``) by the region's per-event
        path, each at its group's lengthscale."""
        s = sigma_x if self.factors is None else sigma_x * self.factors[self.groups.group[rows]]
        return self.region.mass_error(x[rows], y[rows], s)

    def levels(self, sigma_x: float) -> tuple[np.ndarray, np.ndarray]:
        """Each group's raster level below its lengthscale and the weight of the next level,
        (G,) int64 and (G,) float64 (:meth:`level_of`, per group)."""
        g = self.groups.boxes.shape[0]
        if self.factors is None:
            k, frac = self.level_of(sigma_x)
            return np.full(g, k, dtype=np.int64), np.full(g, frac)
        pos = LATTICE_STEPS * np.log2(sigma_x * self.factors)
        k = np.rint(pos)
        snap = np.abs(pos - k) < 1e-9
        k = np.where(snap, k, np.floor(pos))
        return k.astype(np.int64), np.where(snap, 0.0, pos - k)

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

    def plan(self, level: np.ndarray) -> TilePlan:
        """The plan for the groups' levels ``level`` ((G,) int64, :meth:`levels`; kept)."""
        key = np.asarray(level, dtype=np.int64).tobytes()
        hit = self._plans.pop(key, None)
        if hit is None:
            parts = [self._plan_level(int(k), np.flatnonzero(level == k)) for k in np.unique(level)]
            tiles = [t for part in parts for t in part.tiles]
            rows = [part.per_event for part in parts if part.per_event.size]
            first = np.cumsum([0] + [len(part.tiles) for part in parts])
            wide = tuple(
                replace(w, tile=np.where(w.tile >= 0, w.tile + start, -1))
                for part, start in zip(parts, first.tolist(), strict=False)
                for w in part.wide
            )
            hit = TilePlan(tiles, np.concatenate(rows) if rows else np.empty(0, np.int64), wide)
        self._plans[key] = hit
        while len(self._plans) > PLANS_KEPT:
            del self._plans[next(iter(self._plans))]
        return hit

    def _plan_level(self, k: int, members: np.ndarray) -> TilePlan:
        """The plan of level ``k`` for the groups ``members``."""
        s_lo = 2.0 ** (k / LATTICE_STEPS)
        s_hi = s_lo * 2.0 ** (1.0 / LATTICE_STEPS)
        index = self.region.segment_index(s_hi)
        tile = TILE_LENGTHSCALES * s_lo
        boxes = self.groups.boxes[members]
        near = np.array([index.box_near(box) for box in boxes], dtype=bool)
        sides = np.diff(boxes, axis=1)[:, [0, 2]]
        wide = np.any(sides > tile, axis=1)  # a county wider than a tile (an island chain)
        wide_members = members[near & wide]
        members, boxes = members[near & ~wide], boxes[near & ~wide]
        tx = np.floor((boxes[:, 0] + boxes[:, 1]) / (2.0 * tile)).astype(np.int64)
        ty = np.floor((boxes[:, 2] + boxes[:, 3]) / (2.0 * tile)).astype(np.int64)
        margin = 6.0 * s_hi
        h = s_lo / FIELD_KAPPA
        tiles = []
        for a, b in sorted(set(zip(tx.tolist(), ty.tolist(), strict=True))):
            mine = (tx == a) & (ty == b)
            box = (
                float(boxes[mine, 0].min() - margin),
                float(boxes[mine, 1].max() + margin),
                float(boxes[mine, 2].min() - margin),
                float(boxes[mine, 3].max() + margin),
            )
            # model 2: a level's counties change with sigma_x; each set its own rasters, so
            # that a raster (its cells' positions) depends on its box alone, never on the order
            # in which the chain met the sets
            tag = (a, b, "groups")
            if self.factors is not None:
                tag = (*tag, hashlib.blake2b(members[mine].tobytes(), digest_size=8).hexdigest())
            tiles.append(PlanTile(k, tag, box, self.groups.rows(members[mine])))
        if _cells(tiles, h) > MAX_FIELD_CELLS:  # too many cells: the per-event path for them all
            return TilePlan(
                [], np.concatenate([self.groups.rows(m) for m in (members, wide_members)])
            )
        counties = len(tiles)
        wide, per_event = self._wide(k, wide_members, tiles, index.box_near, tile, margin)
        if _cells(tiles, h) > MAX_FIELD_CELLS:  # the squares too: their cases per event
            del tiles[counties:]
            wide, per_event = (), self.groups.rows(wide_members)
        return TilePlan(tiles, per_event, wide)

    def _wide(
        self,
        k: int,
        members: np.ndarray,
        tiles: list[PlanTile],
        near: Callable[[np.ndarray], bool],
        side: float,
        margin: float,
    ) -> tuple[tuple[WideRows, ...], np.ndarray]:
        """The squares of ``side`` that level ``k``'s counties ``members`` (wider than a
        tile) touch, those ``near`` the boundary appended to ``tiles`` with rasters over the
        square widened by ``margin``; and the rows of the per-event path (all of them where
        the triangles are not known). A square's raster depends on its box alone, so it is
        shared by the counties that touch it and the same however the chain got there."""
        rows = self.groups.rows(members)
        if rows.size == 0 or self.groups.tri_boxes is None:
            return (), rows
        keys = self.groups.squares(members, side)
        tile = np.full(keys.size, -1, dtype=np.int64)
        for i, (a, b) in enumerate(zip(*(c.tolist() for c in square_of(keys)), strict=True)):
            x0, y0 = a * side, b * side
            if near(np.array([x0, x0 + side, y0, y0 + side])):
                tile[i] = len(tiles)
                box = (x0 - margin, x0 + side + margin, y0 - margin, y0 + side + margin)
                tiles.append(PlanTile(k, (a, b, "square"), box, np.empty(0, np.int64)))
        return (WideRows(rows, side, keys, tile),), np.empty(0, np.int64)


def _cells(tiles: list[PlanTile], h: float) -> float:
    """Raster cells of side ``h`` that ``tiles`` need in all."""
    return sum(((t.box[1] - t.box[0]) / h) * ((t.box[3] - t.box[2]) / h) for t in tiles)
