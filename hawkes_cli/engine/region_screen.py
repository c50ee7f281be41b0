"""Which events lie far from the study region's boundary: one raster lookup per event.

Most events lose none of their trigger mass: nothing of the boundary lies within ``CUTOFF``
lengthscales of them. :class:`DistanceScreen` tells them apart before any per-event mass work,
from a raster over the boundary's box whose cells hold a *lower bound* on the distance from any
point in the cell to the boundary:

- the boundary segments are sampled at spacing ``h / 2`` (``h`` the cell side), and every cell
  holding a sample is marked, so every boundary point lies within ``h / 4`` of a sample and so
  within ``h / 4 + h / sqrt(2)`` of a marked cell's centre;
- the Euclidean distance transform (:func:`scipy.ndimage.distance_transform_edt`) gives, for
  every cell centre ``o``, the distance ``D h`` to the nearest marked centre;
- a point ``p`` of that cell is within ``h / sqrt(2)`` of ``o``, so its distance to the boundary
  is at least ``D h - h / sqrt(2) - h / 4 - h / sqrt(2) > (D - 2) h``: the cell's bound;
- the raster covers a given box (the events'), not the whole boundary (a region across the date
  line, as the 50 states', would make its cells coarse): the part of the boundary outside the
  box is at least as far as the box's edge, so the bound is also capped by the distance from
  the cell to the box's edge (less a cell: the samples just off the box are not marked).

An event whose bound reaches ``CUTOFF`` times its lengthscale keeps its whole mass to the exact
path's own precision (the segments it would skip there contribute below ``exp(-CUTOFF^2 / 2)``).
Events outside the raster's box are never screened out. Built once per region (under a second
at ``CELLS_LONG`` cells along the box's longer side: ~0.024 degrees for the 50 states' events);
a lookup costs 15-25 ns per event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Cells along the longer side of the boundary's box (the lower 48 states: ~0.014 degrees).
CELLS_LONG = 4096
#: The bound's slack in cells (module docstring: sqrt(2) + 1/4, rounded up).
SLACK_CELLS = 2.0


@dataclass(frozen=True)
class DistanceScreen:
    """A lower bound on the distance to the boundary, per raster cell.

    Attributes
    ----------
    box : (float, float, float, float)
        ``x0, x1, y0, y1`` the raster covers (coordinate units).
    h : float
        Cell side (coordinate units).
    bound : (ny, nx) float32
        Lower bound on the distance from any point of each cell to the boundary (coordinate
        units, >= 0).
    """

    box: tuple[float, float, float, float]
    h: float
    bound: np.ndarray

    @classmethod
    def build(
        cls,
        p: np.ndarray,
        q: np.ndarray,
        box: tuple[float, float, float, float],
        cells: int = CELLS_LONG,
    ) -> DistanceScreen:
        """The screen of the boundary segments ``p -> q`` ((S, 2) float64 each) over ``box``
        (``x0, x1, y0, y1``, coordinate units)."""
        from scipy import ndimage

        x0, x1, y0, y1 = (float(v) for v in box)
        h = max(x1 - x0, y1 - y0) / cells
        if not (math.isfinite(h) and h > 0):  # an empty or degenerate box: screen nothing out
            return cls((x0, x1, y0, y1), 1.0, np.zeros((1, 1), np.float32))
        nx, ny = math.ceil((x1 - x0) / h) + 1, math.ceil((y1 - y0) / h) + 1
        length = np.hypot(*(q - p).T)
        count = np.ceil(length / (0.5 * h)).astype(np.int64) + 1
        seg = np.repeat(np.arange(p.shape[0]), count)
        k = np.arange(seg.size) - np.repeat(np.cumsum(count) - count, count)
        t = (k / np.maximum(count[seg] - 1, 1))[:, None]
        cell = np.floor((p[seg] + t * (q[seg] - p[seg]) - (x0, y0)) / h).astype(np.int64)
        keep = (cell[:, 0] >= 0) & (cell[:, 0] < nx) & (cell[:, 1] >= 0) & (cell[:, 1] < ny)
        free = np.ones((ny, nx), dtype=bool)
        free[cell[keep, 1], cell[keep, 0]] = False
        dist = (
            ndimage.distance_transform_edt(free) if not free.all() else np.full(free.shape, np.inf)
        )
        to_x = np.minimum(np.arange(nx), nx - 1 - np.arange(nx))
        to_y = np.minimum(np.arange(ny), ny - 1 - np.arange(ny))
        # whole cells to the raster's edge, less one: a boundary point on the raster may be
        # nearest to a sample just off it (up to h / 4 away), which is not marked
        edge = np.maximum(np.minimum.outer(to_y, to_x) - 1, 0)
        bound = np.minimum(np.maximum(dist - SLACK_CELLS, 0.0), edge) * h
        return cls((x0, x1, y0, y1), h, bound.astype(np.float32))

    def _cell(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat cell index, inside the raster) of each point, (N,) int64 and bool."""
        ny, nx = self.bound.shape
        i = np.floor((np.asarray(x, np.float64) - self.box[0]) / self.h)
        j = np.floor((np.asarray(y, np.float64) - self.box[2]) / self.h)
        inside = (i >= 0) & (i < nx) & (j >= 0) & (j < ny)
        return np.where(inside, j * nx + i, 0).astype(np.int64), inside

    def holds(self, box: tuple[float, float, float, float]) -> bool:
        """Whether the raster covers the box ``x0, x1, y0, y1``."""
        return (
            self.box[0] <= box[0] and box[1] < self.box[1] and self.box[2] <= box[2]
            and box[3] < self.box[3]
        )  # fmt: skip

    def covers(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether each point lies on the raster, (N,) bool."""
        return self._cell(x, y)[1]

    def far(self, x: np.ndarray, y: np.ndarray, reach: np.ndarray | float) -> np.ndarray:
        """Whether each point lies at least ``reach`` (coordinate units) from the boundary,
        (N,) bool; False for points off the raster."""
        at, inside = self._cell(x, y)
        return inside & (self.bound.ravel()[at] >= reach)


def kept_screen(
    kept: list[DistanceScreen], p: np.ndarray, q: np.ndarray, x: np.ndarray, y: np.ndarray
) -> DistanceScreen:
    """The screen in ``kept`` (a one-element cache, updated in place) if it covers the points
    ``x``, ``y`` (a rank's events); else one built over the union of its box and theirs,
    widened by a tenth, when a tenth of the points lie off it. ``p``, ``q``: the boundary."""
    got = kept[0] if kept else None
    x0, x1, y0, y1 = float(x.min()), float(x.max()), float(y.min()), float(y.max())
    if got is None or (not got.holds((x0, x1, y0, y1)) and _off_share(got, x, y) > 0.1):
        if got is not None:
            x0, x1 = min(x0, got.box[0]), max(x1, got.box[1])
            y0, y1 = min(y0, got.box[2]), max(y1, got.box[3])
        pad = 0.1 * max(x1 - x0, y1 - y0)
        got = DistanceScreen.build(p, q, (x0 - pad, x1 + pad, y0 - pad, y1 + pad))
        kept[:] = [got]
    return got


def _off_share(screen: DistanceScreen, x: np.ndarray, y: np.ndarray) -> float:
    """The share of the points off the raster (``1 - mean(covers)``), from a cheap upper
    bound where that is at most 0.1: the points beyond each side of its box, or within a
    millionth of a cell of it (counted once per side they pass), then exactly."""
    ny, nx = screen.bound.shape
    x0, y0, h = screen.box[0], screen.box[2], screen.h
    eps = 1e-6 * h
    beyond = (
        np.count_nonzero(x < x0 + eps)
        + np.count_nonzero(x >= x0 + nx * h - eps)
        + np.count_nonzero(y < y0 + eps)
        + np.count_nonzero(y >= y0 + ny * h - eps)
    )
    if beyond <= 0.1 * x.size:
        return beyond / x.size
    return float(np.mean(~screen.covers(x, y)))
