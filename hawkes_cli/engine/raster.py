"""The edge correction's rasters: a region's area coverage blurred by the trigger's Gaussian.

:class:`Field` is one lattice level's raster over a box: the exact share inside the region of
cells three times finer (:func:`coverage`, from the region's boundary segments), blurred by the
Gaussian of the level's lengthscale (a little of it on the fine cells, the rest on the raster's:
:data:`FIELD_SUPERSAMPLE`), with its second differences for a bilinear read exact on
quadratics. A
raster is a function of its segments, lengthscale and box alone; the region
(:meth:`~.region.BoundaryRegion.raster`) keeps them and gives each only the segments near its
rows (:mod:`.segment_bands`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

log = logging.getLogger(__name__)

#: Raster cells per lengthscale.
FIELD_KAPPA = 4
#: The coverage is taken on cells this many times finer along each axis (odd: every raster
#: cell's centre is a fine cell's) and blurred there by :data:`FIELD_PRESMOOTH` raster cells
#: before the rest of the Gaussian is applied on the raster itself. Blurring the coarse
#: coverage directly samples a function with kinks (the box-blurred boundary) at the raster's
#: spacing, an error that depends on how the boundary's long straight stretches (the 49th
#: parallel) fall on the cells: a bias of ~1e-5 per boundary event whose sign changed from one
#: lattice level to the next, which the masses' cubic in ``log sigma_x`` turned into a slope
#: error of ~110 nats per unit at 1M (0.26 posterior sds of ``sigma_x``;
#: ``benchmarks/edge_interpolation.py``). Smoothed first, the function the raster samples is
#: smooth (aliasing ``exp(-2 pi^2)``, 3e-9) and the level's bias falls about tenfold.
FIELD_SUPERSAMPLE = 3
FIELD_PRESMOOTH = 1.0


@dataclass(frozen=True)
class Field:
    """The trigger mass inside the region on a raster, for one lengthscale ``s``.

    Built from the region's exact area coverage of cells :data:`FIELD_SUPERSAMPLE` times
    finer (:func:`coverage`), blurred with the Gaussian of sd ``s``
    (:func:`scipy.ndimage.gaussian_filter`, truncated at 5 sd; :data:`FIELD_PRESMOOTH` of it
    on the fine cells).
    The box reaches 6 lengthscales beyond every event it serves, so the blur sees all the
    region that matters. Cell ``(j, i)`` is centred at ``(x0 + (i + 1/2) h, y0 + (j + 1/2) h)``.
    """

    box: tuple[float, float, float, float]
    h: float
    values: np.ndarray  # (3, ny, nx) float32: mass, its second differences along x and y

    @classmethod
    def build(
        cls, p: np.ndarray, q: np.ndarray, s: float, box: tuple[float, float, float, float]
    ) -> Field:
        x0, x1, y0, y1 = box
        h = s / FIELD_KAPPA
        nx = math.ceil((x1 - x0) / h)
        ny = math.ceil((y1 - y0) / h)
        k = FIELD_SUPERSAMPLE
        cover = coverage(p, q, (x0, y0), h / k, (ny * k, nx * k))
        # the fine cells' area coverage blurs by a box of one fine cell along each axis
        # (variance (h / k)^2 / 12): a Gaussian of FIELD_PRESMOOTH raster cells in all there,
        # then the rest of the lengthscale's on the raster's cells (their centres)
        pre = math.sqrt((FIELD_PRESMOOTH * k) ** 2 - 1.0 / 12.0)
        smooth = ndimage.gaussian_filter(cover, pre, mode="constant", truncate=5.0)
        centres = smooth[k // 2 :: k, k // 2 :: k].astype(np.float32)
        sd = math.sqrt(FIELD_KAPPA**2 - FIELD_PRESMOOTH**2)
        values = np.zeros((3, ny, nx), dtype=np.float32)
        mass = values[0]
        ndimage.gaussian_filter(centres, sd, output=mass, mode="constant", truncate=5.0)
        # second differences along each axis, for the bilinear read's curvature correction
        values[1, :, 1:-1] = mass[:, 2:] - 2.0 * mass[:, 1:-1] + mass[:, :-2]
        values[2, 1:-1] = mass[2:] - 2.0 * mass[1:-1] + mass[:-2]
        log.debug("edge raster s=%.4g: %d x %d cells", s, ny, nx)
        return cls(box, h, values)

    def covers(self, box: tuple[float, float, float, float]) -> bool:
        """Whether this raster serves every event whose widened box is ``box``."""
        return (
            self.box[0] <= box[0]
            and box[1] <= self.box[1]
            and self.box[2] <= box[2]
            and box[3] <= self.box[3]
        )

    def read(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mass at each point, float64 (N,): bilinear between cell centres, less the
        bilinear read's own error ``fx (1 - fx) M_xx h^2 / 2`` (and along y), from the
        raster's second differences (so the read is exact for quadratics)."""
        _, ny, nx = self.values.shape
        u = np.clip((x - self.box[0]) / self.h - 0.5, 0.0, nx - 1.000001)
        v = np.clip((y - self.box[2]) / self.h - 0.5, 0.0, ny - 1.000001)
        i = u.astype(np.int64)
        j = v.astype(np.int64)
        fx = u - i
        fy = v - j
        flat = self.values.reshape(3, -1)
        at = j * nx + i
        m = flat[0]
        mass = (1.0 - fy) * ((1.0 - fx) * m[at] + fx * m[at + 1]) + fy * (
            (1.0 - fx) * m[at + nx] + fx * m[at + nx + 1]
        )
        # the curvature at the nearest cell centre (the correction is itself O(h^2))
        near = at + (fx > 0.5) + nx * (fy > 0.5)
        correction = fx * (1.0 - fx) * flat[1][near] + fy * (1.0 - fy) * flat[2][near]
        return mass - 0.5 * correction


def coverage(
    p: np.ndarray, q: np.ndarray, origin: tuple[float, float], h: float, shape: tuple[int, int]
) -> np.ndarray:
    """The area share of each raster cell inside the region, (ny, nx) float64 in [0, 1].

    Signed-area accumulation (as font rasterisers do it): every segment is cut at the grid
    lines into pieces inside one cell each; a piece that descends by ``dv`` cells (the region
    is on the segment's left, so east of a descending piece) adds ``dv * (1 - xm)`` to its
    cell and ``dv * xm`` to the next one, ``xm`` its mean position across the cell; the
    running sum along each row is then the exact covered area. Pieces left of the raster set
    the row's starting value; pieces above, below or right of it change no cell.
    """
    ny, nx = shape
    u0 = (p[:, 0] - origin[0]) / h
    v0 = (p[:, 1] - origin[1]) / h
    du = (q[:, 0] - origin[0]) / h - u0
    dv = (q[:, 1] - origin[1]) / h - v0
    # keep only segments that reach the raster's rows and are not wholly right of it
    vmin = np.minimum(v0, v0 + dv)
    vmax = np.maximum(v0, v0 + dv)
    keep = (vmax > 0) & (vmin < ny) & (np.minimum(u0, u0 + du) < nx) & (dv != 0)
    u0, v0, du, dv = u0[keep], v0[keep], du[keep], dv[keep]
    # the parameters where each segment crosses a grid line (u or v integer), with 0 and 1
    cuts = [np.zeros(u0.size), np.ones(u0.size)]
    owners = [np.arange(u0.size), np.arange(u0.size)]
    for start, delta in ((u0, du), (v0, dv)):
        lo = np.ceil(np.minimum(start, start + delta))
        hi = np.floor(np.maximum(start, start + delta))
        count = np.maximum(hi - lo + 1, 0).astype(np.int64)
        count[delta == 0] = 0
        seg = np.repeat(np.arange(u0.size), count)
        line = lo[seg] + (np.arange(seg.size) - np.repeat(np.cumsum(count) - count, count))
        cuts.append((line - start[seg]) / delta[seg])
        owners.append(seg)
    t = np.clip(np.concatenate(cuts), 0.0, 1.0)
    seg = np.concatenate(owners)
    order = np.lexsort((t, seg))
    t, seg = t[order], seg[order]
    piece = seg[1:] == seg[:-1]
    ta, tb, seg = t[:-1][piece], t[1:][piece], seg[:-1][piece]
    ua, ub = u0[seg] + ta * du[seg], u0[seg] + tb * du[seg]
    va, vb = v0[seg] + ta * dv[seg], v0[seg] + tb * dv[seg]
    umid = 0.5 * (ua + ub)
    row = np.floor(0.5 * (va + vb)).astype(np.int64)
    col = np.floor(umid).astype(np.int64)
    weight = va - vb  # descending: entering the region going east
    xm = umid - col
    left = col < 0  # wholly left of the raster: the whole row starts with it
    col = np.where(left, 0, col)
    xm = np.where(left, 0.0, xm)
    inside = (row >= 0) & (row < ny) & (col < nx)
    row, col, weight, xm = row[inside], col[inside], weight[inside], xm[inside]
    width = nx + 1
    flat = row * width + col
    acc = np.bincount(flat, weights=weight * (1.0 - xm), minlength=ny * width)
    acc += np.bincount(flat + 1, weights=weight * xm, minlength=ny * width)
    return np.clip(np.cumsum(acc.reshape(ny, width)[:, :nx], axis=1), 0.0, 1.0)
