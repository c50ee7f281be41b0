"""The trigger part of the intensity at target points: its mean over the pixels of a raster.

For sources ``m`` with weights ``w_m``, centres ``(x_m, y_m)`` and spatial sds ``s_m``,
:func:`pixel_mean` gives, for every pixel of a rectilinear raster, the mean over the pixel of

    f(x) = sum_m w_m phi2(x - x_m; s_m)          (phi2: isotropic 2-D normal density)

exactly up to the cut-off: the isotropic normal is separable, so the mass of source ``m`` in
the pixel ``[a, b] x [c, d]`` is ``(Phi((b - x_m)/s_m) - Phi((a - x_m)/s_m)) (Phi((d - y_m)/s_m)
- Phi((c - y_m)/s_m))``. Each source deposits into the pixels within ``cut`` sds of it (the mass
beyond, below ``2 Phi(-cut)`` of it, is dropped). Work is grouped by footprint, in blocks of
bounded size, so memory stays O(pixels + block) and no source x pixel matrix is formed. A
kernel narrower than a pixel lands in one or two pixels, as its mass should.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

#: Kernel sds beyond which a source deposits nothing.
DEFAULT_CUT = 5.0
_BLOCK = 4_000_000


def pixel_mean(
    x: np.ndarray,
    y: np.ndarray,
    scale: np.ndarray,
    weight: np.ndarray,
    x_edges: np.ndarray,
    y_edges: np.ndarray,
    *,
    cut: float = DEFAULT_CUT,
) -> np.ndarray:
    """Mean of ``f`` over each pixel (see the module docstring).

    Parameters
    ----------
    x, y, scale, weight : (M,) float64
        Source centres, sds (> 0) and weights (coordinate units; any unit for the weights).
    x_edges : (NX + 1,) float64, y_edges : (NY + 1,) float64
        Pixel edges, ascending.
    cut
        Sds beyond which a source's mass is dropped.

    Returns
    -------
    (NY, NX) float64
        Weight per coordinate unit squared, averaged over each pixel.
    """
    xe = np.asarray(x_edges, dtype=np.float64)
    ye = np.asarray(y_edges, dtype=np.float64)
    nx, ny = xe.size - 1, ye.size - 1
    mass = np.zeros(nx * ny)
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    s, w = np.asarray(scale, np.float64), np.asarray(weight, np.float64)
    keep = (
        (w != 0)
        & (x + cut * s > xe[0])
        & (x - cut * s < xe[-1])
        & (y + cut * s > ye[0])
        & (y - cut * s < ye[-1])
    )
    x, y, s, w = x[keep], y[keep], s[keep], w[keep]
    ix0 = np.clip(np.searchsorted(xe, x - cut * s, side="right") - 1, 0, nx - 1)
    ix1 = np.clip(np.searchsorted(xe, x + cut * s, side="right") - 1, 0, nx - 1)
    iy0 = np.clip(np.searchsorted(ye, y - cut * s, side="right") - 1, 0, ny - 1)
    iy1 = np.clip(np.searchsorted(ye, y + cut * s, side="right") - 1, 0, ny - 1)
    span = np.maximum(ix1 - ix0, iy1 - iy0) + 1
    width = 1 << np.ceil(np.log2(span)).astype(np.int64)  # footprint groups: powers of two
    for k in np.unique(width):
        group = np.flatnonzero(width == k)
        step = max(1, _BLOCK // int(k * k))
        j = np.arange(int(k) + 1)
        for g in range(0, group.size, step):
            idx = group[g : g + step]
            cx = ix0[idx, None] + j[None, :]  # (m, k + 1) edge indices
            cy = iy0[idx, None] + j[None, :]
            ex = xe[np.minimum(cx, nx)]
            ey = ye[np.minimum(cy, ny)]
            px = np.diff(ndtr((ex - x[idx, None]) / s[idx, None]), axis=1)  # (m, k)
            py = np.diff(ndtr((ey - y[idx, None]) / s[idx, None]), axis=1)
            valid_x = cx[:, :-1] < nx
            valid_y = cy[:, :-1] < ny
            px = np.where(valid_x, px, 0.0) * w[idx, None]
            py = np.where(valid_y, py, 0.0)
            cell = (
                np.minimum(cy[:, :-1], ny - 1)[:, :, None] * nx
                + np.minimum(cx[:, :-1], nx - 1)[:, None, :]
            )
            mass += np.bincount(
                cell.ravel(), weights=(py[:, :, None] * px[:, None, :]).ravel(), minlength=nx * ny
            )
    area = np.diff(ye)[:, None] * np.diff(xe)[None, :]
    return mass.reshape(ny, nx) / area
