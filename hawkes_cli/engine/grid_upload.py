"""The truncated trigger's grid index and row blocks on the device.

:func:`upload_index` copies a :class:`~hawkes_cli.engine.grid.GridIndex` (numpy, host) into the
buffers the kernels of ``kernels/truncated.cl`` read (:class:`IndexBuffers`) and allocates
those its prefix sums and Hermite moments are written to; :class:`DeviceIndex` keeps them with
what is cached per index (the per-level cut-offs of the last ``kappa``, the row blocks and
their grouping level per time width, the ``sigma_t`` the prefix sums were made for).
:class:`DeviceBlocks` is a set of row blocks with the levels within reach of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import kernels
from . import profile
from .device import VEC, DeviceEvents
from .grid import GridIndex
from .launch import Buffer

_PAD = VEC  # vector width of the kernel; sorted source arrays are padded by this


@dataclass(frozen=True)
class IndexBuffers:
    """The device buffers of one grid index (sources in the index's sorted order).

    Attributes
    ----------
    st, sxr, syr, sw
        Times, coordinates relative to the corner of the source's cell, weights: working
        precision, padded by the kernels' vector width.
    std, swd
        Times and weights in float64.
    sq
        Each source's 4 x 4 sub-cell (``4 qx + qy``), uint8.
    ckey, cbeg, cdlo, cdhi
        Cell keys (int64), first source of each cell (int32, ``cells + 1``), the smallest and
        largest density (model 1: weight 1) of each cell's sources.
    loff, hs, dlo
        First cell of each grid level, cell sizes, the level's smallest density.
    enx, eny
        Offsets of the expansion sources from their box's centre over half the box (float64,
        padded).
    moff, mom
        First moment slot of each expansion cell (int32) and the moments (written by
        ``cell_moments``).
    pre, pre16
        Per-cell prefix sums of the tail weights, per cell and per sub-cell (written by
        ``cell_prefix``, ``cell_prefix16``).
    mc0, mk0
        First expansion cell and first expansion source (:attr:`GridIndex.expanded`).
    """

    st: Buffer
    sxr: Buffer
    syr: Buffer
    sw: Buffer
    std: Buffer
    swd: Buffer
    sq: Buffer
    ckey: Buffer
    cbeg: Buffer
    cdlo: Buffer
    cdhi: Buffer
    loff: Buffer
    hs: Buffer
    dlo: Buffer
    enx: Buffer
    eny: Buffer
    moff: Buffer
    mom: Buffer
    pre: Buffer
    pre16: Buffer
    mc0: int
    mk0: int


@dataclass(eq=False)
class DeviceIndex:
    """A grid index, its device buffers and what is cached per index.

    Attributes
    ----------
    index : GridIndex
    buffers : IndexBuffers
    kl : (kappa, buffer) or None
        The per-level cut-off exponents of the last ``kappa`` on the device.
    rows : dict
        Row blocks on the host by time width (the probe of the calibration and the first
        evaluation share them).
    group : dict
        Their grouping level by time width.
    pre_key : (sigma_t, amplitude version) or None
        What the prefix sums and moments were last computed for.
    amplitude : (version, sa, swd) or None
        The sources' amplitudes of that version (:func:`upload_amplitude`).
    """

    index: GridIndex
    buffers: IndexBuffers
    kl: tuple[float, Any] | None = None
    rows: dict[float, np.ndarray] = field(default_factory=dict)
    group: dict[float, int] = field(default_factory=dict)
    pre_key: tuple[float, int] | None = None
    amplitude: tuple[int, Any, Any] | None = None

    def source_weights(
        self,
        events: DeviceEvents,
        amplitude: np.ndarray | None,
        version: int,
        weight: np.ndarray,
    ) -> tuple[Any, Any]:
        """``(sa, swd)`` for the row-block and prefix kernels: with ``amplitude`` (shape (N,),
        ``version`` its number), :func:`upload_amplitude`'s buffers, kept per version; without,
        ``sw`` (then unread) and the plain weights ``swd``."""
        if amplitude is None:
            return self.buffers.sw, self.buffers.swd
        if self.amplitude is None or self.amplitude[0] != version:
            with profile.stage("amplitude upload"):
                sa, swd = upload_amplitude(events, self.index, amplitude, weight)
            self.amplitude = (version, sa, swd)
        return self.amplitude[1], self.amplitude[2]


@dataclass(frozen=True)
class DeviceBlocks:
    """Row blocks on the device: ``rows`` (count x 16 int32, :func:`~hawkes_cli.engine.grid.
    row_blocks`) and ``near`` (count uint64, the levels within reach of each block,
    :func:`~hawkes_cli.engine.grid.block_levels`)."""

    rows: Any
    near: Any
    count: int


def _padded(values: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.zeros(values.size + _PAD, dtype=dtype)
    out[: values.size] = values
    return out


def _cell_offsets(
    index: GridIndex, x: np.ndarray, y: np.ndarray, origin: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per source in ``index``'s sorted order: the cell size of its level, its coordinates
    relative to the corner of its cell (in its level's grid) and its 4 x 4 sub-cell
    ``4 qx + qy`` (uint8)."""
    o = index.order
    lev = index.level[o]
    h, ih = index.h[lev], index.inv_h[lev]
    xs, ys = x[o], y[o]
    x0, y0 = origin
    cx = np.floor((xs - x0) * ih)
    cy = np.floor((ys - y0) * ih)
    rx, ry = xs - (x0 + cx * h), ys - (y0 + cy * h)
    qx = np.clip(np.floor(rx * (4.0 / h)), 0, 3)
    qy = np.clip(np.floor(ry * (4.0 / h)), 0, 3)
    return h, rx, ry, (4 * qx + qy).astype(np.uint8)


def upload_index(
    events: DeviceEvents,
    index: GridIndex,
    *,
    x: np.ndarray,
    y: np.ndarray,
    origin: tuple[float, float],
    weight: np.ndarray,
    floor: np.ndarray,
) -> IndexBuffers:
    """Upload ``index`` of the sources at ``x``, ``y`` (the events' times, ``weight``) to the
    device of ``events``.

    Parameters
    ----------
    events
        The events on the device (times, working precision, buffers).
    index
        The grid index of these locations.
    x, y : (N,) float64
        The sources' current locations.
    origin
        ``(x0, y0)``, the corner of every level's grid.
    weight : (N,) float64
        ``w_m``: densities (model 2) or ones.
    floor : (levels,) float64
        The smallest density of each density level.
    """
    up, real = events.upload, events.real
    o = index.order
    w = weight[o]
    h, rx, ry, sq = _cell_offsets(index, x, y, origin)
    # expansion sources (sorted last): offsets from their box's centre over half the box
    mc0, mk0 = index.expanded
    half = 0.5 * h[mk0:]
    slots = np.diff(index.cell_begin[mc0:]) // kernels.HERMITE_STRIDE + 1
    moff = np.concatenate([[0], np.cumsum(slots)]).astype(np.int32)
    t = events.time[o]
    slots_pre = events.n + index.cell_key.size + 1

    def per_cell(ufunc: np.ufunc) -> np.ndarray:
        if not index.cell_key.size:
            return np.ones(1)
        return ufunc.reduceat(w, index.cell_begin[:-1])

    return IndexBuffers(
        st=up(_padded(t, real)),
        sxr=up(_padded(rx, real)),
        syr=up(_padded(ry, real)),
        sw=up(_padded(w, real)),
        std=up(t),
        swd=up(w),
        sq=up(sq),
        ckey=up(index.cell_key.astype(np.int64)),
        cbeg=up(index.cell_begin),
        # the smallest and largest density (model 1: weight 1) of each cell's sources;
        # equal when the cell holds one density
        cdlo=up(per_cell(np.minimum)),
        cdhi=up(per_cell(np.maximum)),
        loff=up(index.level_offset),
        hs=up(index.h),
        dlo=up(floor[index.band]),
        enx=up(_padded(np.clip(rx[mk0:] / half - 1.0, -1.0, 1.0), np.float64)),
        eny=up(_padded(np.clip(ry[mk0:] / half - 1.0, -1.0, 1.0), np.float64)),
        moff=up(moff),
        mom=events.output(8 * kernels.HERMITE_ORDER**2 * int(moff[-1]), read=True),
        pre=events.output(8 * slots_pre, read=True),
        pre16=events.output(16 * 8 * slots_pre, read=True),
        mc0=mc0,
        mk0=mk0,
    )


def upload_amplitude(
    events: DeviceEvents, index: GridIndex, amplitude: np.ndarray, weight: np.ndarray
) -> tuple[Buffer, Buffer]:
    """Each source's amplitude ``a_m`` (``model.edge: renormalized``) in ``index``'s sorted
    order, as the row-block kernels with amplitudes read it.

    Parameters
    ----------
    events
        The events on the device.
    index
        The grid index the buffers go with.
    amplitude, weight : (N,) float64
        ``a_m`` and ``w_m`` (densities for model 2, else ones) by event index.

    Returns
    -------
    sa, swd
        ``a_m`` in the working precision, padded like ``IndexBuffers.sw`` (the pair terms), and
        ``w_m a_m`` in float64 (in place of ``IndexBuffers.swd``: the prefix sums, Hermite
        moments and so every bound carry the amplitude).
    """
    a = amplitude[index.order]
    return events.upload(_padded(a, events.real)), events.upload(weight[index.order] * a)
