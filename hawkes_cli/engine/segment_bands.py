"""The boundary segments that may reach a raster's rows, found without a scan of all of them.

A raster's coverage (:func:`.raster.coverage`) sums every boundary segment that crosses its
rows and is not wholly right of it. Model 2 at 1M builds about a thousand rasters at each new
lattice point of ``sigma_x`` (a tile's own level and the level above, for each of ~500 tiles),
and a scan of all 206,000 segments of the US counties' boundary per raster was half of the
build (the 1M redraw bench's events: 2.7-3.0 s of one idle EPYC core per lattice point with
the scan, 1.4-1.6 s with the bands). Sorted by their lower end, the segments that may reach a band
``y0 <= y <= y1`` are one slice (those whose lower end lies in ``[y0 - height, y1]``, where
``height`` bounds every sorted segment's height), plus the few taller ones kept apart. The
coverage's own test then decides among these candidates, in the segments' own order, so it
keeps the same segments in the same order as a scan and the raster is the same bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Segments taller than this quantile of heights are kept apart (listed in every band), so one
#: long straight border does not widen every band's slice.
TALL_QUANTILE = 0.999


@dataclass(frozen=True)
class SegmentBands:
    """Boundary segments sorted by their lower end.

    Attributes
    ----------
    order : (S_sorted,) int64
        Indices of the segments no taller than ``height``, by ascending lower end.
    low : (S_sorted,) float64
        Their lower ends' ``y`` in that order (coordinate units).
    height : float
        Bound on those segments' heights (coordinate units).
    tall : (S_tall,) int64
        The other segments' indices.
    west : (S,) float64
        Every segment's western end ``min(x)``.
    top : (S,) float64
        Every segment's upper end ``max(y)``.
    """

    order: np.ndarray
    low: np.ndarray
    height: float
    tall: np.ndarray
    west: np.ndarray
    top: np.ndarray

    @classmethod
    def build(cls, p: np.ndarray, q: np.ndarray) -> SegmentBands:
        """The bands of the segments from ``p`` to ``q``, (S, 2) float64 each."""
        bottom = np.minimum(p[:, 1], q[:, 1])
        top = np.maximum(p[:, 1], q[:, 1])
        heights = top - bottom
        height = float(np.quantile(heights, TALL_QUANTILE)) if heights.size else 0.0
        short = np.flatnonzero(heights <= height)
        order = short[np.argsort(bottom[short], kind="stable")]
        return cls(
            order=order,
            low=bottom[order],
            height=height,
            tall=np.flatnonzero(heights > height),
            west=np.minimum(p[:, 0], q[:, 0]),
            top=top,
        )

    def reaching(self, x1: float, y0: float, y1: float) -> np.ndarray:
        """Indices of every segment that may meet ``x <= x1, y0 <= y <= y1`` (closed), in
        ascending order, (k,) int64: a superset of those that do, no scan of all segments."""
        a = np.searchsorted(self.low, y0 - self.height, side="left")
        b = np.searchsorted(self.low, y1, side="right")
        near = np.concatenate([self.order[a:b], self.tall])
        near = near[(self.top[near] >= y0) & (self.west[near] <= x1)]
        return np.sort(near)
