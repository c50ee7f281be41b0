"""The truncated trigger's grid index and row blocks on the device.

:func:`upload_index` puts a :class:`~hawkes_cli.engine.grid.GridIndex` (numpy, host) into the
buffers the kernels of ``kernels/truncated.cl`` read (:class:`IndexBuffers`; the sources in the
index's order are gathered on the device by ``index_sources``) and allocates those its prefix
sums and Hermite moments are written to; :class:`DeviceIndex` keeps them with
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
from .device import VEC, DeviceEvents, item_range
from .grid import PRESENCE_CELLS, GridIndex
from .launch import (
    BlockLevelsArgs,
    Buffer,
    IndexSourcesArgs,
    PresenceCountArgs,
    PresenceScanArgs,
    kernel,
)

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
    pre_key : (sigma_t, amplitude version) or None
        What the prefix sums and moments were last computed for.
    amplitude : (version, sa, swd) or None
        The sources' amplitudes of that version (:func:`upload_amplitude`).
    """

    index: GridIndex
    buffers: IndexBuffers
    kl: tuple[float, Any] | None = None
    rows: dict[float, np.ndarray] = field(default_factory=dict)
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


@dataclass(frozen=True)
class DevicePresence:
    """The sources' counts per level on a grid over the data's extent, as
    :func:`~hawkes_cli.engine.grid.level_presence` makes them (same corner, cell and tables),
    built and kept on the device for :meth:`block_levels`.

    Attributes
    ----------
    x0, y0, cell : float
        The grid's corner and cell size (coordinate units).
    levels, cells : int
        Levels, and cells per side.
    sat : Buffer
        ``levels x (cells + 1) x (cells + 1)`` int32 summed-area tables (``Presence.sat``).
    """

    x0: float
    y0: float
    cell: float
    levels: int
    cells: int
    sat: Buffer

    @classmethod
    def build(
        cls,
        events: DeviceEvents,
        x: np.ndarray,
        y: np.ndarray,
        level: Buffer,
        levels: int,
        cells: int = PRESENCE_CELLS,
    ) -> DevicePresence:
        """Count the events at ``x``, ``y`` (host copies of the events' float64 locations on
        the device, shape (N,), N > 0; their extent sets the grid) by their grid level
        (``level``: int32 per event on the device, ``levels`` of them) on the device: kernels
        ``presence_count`` and ``presence_scan``."""
        x0, y0 = float(x.min()), float(y.min())
        cell = max(float(x.max()) - x0, float(y.max()) - y0, 1e-300) / cells
        w = cells + 1
        sat = events.zeroed(4 * levels * w * w)
        program, n = events.program(), events.n
        args = PresenceCountArgs(events.buf_xd, events.buf_yd, level, n, cells, x0, y0, cell, sat)
        kernel(program, "presence_count")(events.queue, item_range(n), None, args)
        scan = kernel(program, "presence_scan")
        for axis in (0, 1):
            scan(
                events.queue,
                item_range(levels * w),
                None,
                PresenceScanArgs(sat, levels, cells, axis),
            )
        return cls(x0, y0, cell, levels, cells, sat)

    def block_levels(
        self, events: DeviceEvents, blocks: Buffer, count: int, reach: np.ndarray
    ) -> Buffer:
        """:func:`~hawkes_cli.engine.grid.block_levels` of the ``count`` row blocks in
        ``blocks`` (device, ``count`` x 16 int32) on the device (kernel ``block_levels``,
        the same bits), the rows' locations read from the events' float64 copies; returns
        the ``count`` uint64 level masks (device)."""
        pad = np.asarray(reach, dtype=np.float64) * (1.0 + 1e-9) + 1e-12 * self.cell * self.cells
        near = events.output(8 * max(count, 1), read=True)
        if count:
            args = BlockLevelsArgs(
                blocks, count, events.buf_xd, events.buf_yd, self.sat, self.levels, self.cells,
                self.x0, self.y0, self.cell, events.upload(pad), near,
            )  # fmt: skip
            kernel(events.program(), "block_levels")(events.queue, item_range(count), None, args)
        return near


def _padded(values: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.zeros(values.size + _PAD, dtype=dtype)
    out[: values.size] = values
    return out


@dataclass(frozen=True)
class IndexArrays:
    """The host arrays :func:`upload_index` sends up for one grid index besides the index's
    own (a pure function of the index and the weights, :func:`index_arrays`: the worker of
    :mod:`.ahead` makes them with the index).

    Attributes
    ----------
    order, level : (N,) int32
        The index's sorted order and each sorted source's grid level.
    cdlo, cdhi : (cells,) float64
        The smallest and largest density (model 1: weight 1) of each cell's sources.
    moff : (expansion cells + 1,) int32
        First moment slot of each expansion cell.
    """

    order: np.ndarray
    level: np.ndarray
    cdlo: np.ndarray
    cdhi: np.ndarray
    moff: np.ndarray


def index_arrays(index: GridIndex, weight: np.ndarray) -> IndexArrays:
    """:class:`IndexArrays` of ``index`` with the sources' weights ``weight`` ((N,) float64,
    densities for model 2, ones for model 1)."""
    o = index.order
    mc0 = index.expanded[0]
    slots = np.diff(index.cell_begin[mc0:]) // kernels.HERMITE_STRIDE + 1
    moff = np.concatenate([[0], np.cumsum(slots)]).astype(np.int32)
    cells = max(index.cell_key.size, 1)
    # the smallest and largest density of each cell's sources; equal when it holds one
    one = weight.size == 0 or bool(weight[0] == 1.0 and np.all(weight == 1.0))
    if one or not index.cell_key.size:
        lo, hi = np.ones(cells), np.ones(cells)
    else:
        sorted_w = weight[o]
        lo = np.minimum.reduceat(sorted_w, index.cell_begin[:-1])
        hi = np.maximum.reduceat(sorted_w, index.cell_begin[:-1])
    return IndexArrays(o.astype(np.int32), index.level.astype(np.int32), lo, hi, moff)


def upload_index(
    events: DeviceEvents,
    index: GridIndex,
    arrays: IndexArrays,
    *,
    origin: tuple[float, float],
    weight_buffer: Buffer,
    floor: np.ndarray,
) -> IndexBuffers:
    """Put ``index`` of the events' current locations on the device of ``events``.

    The sources' arrays in the index's sorted order are gathered on the device (kernel
    ``index_sources``) from the float64 copies of times and locations the events keep
    (:meth:`~.device.DeviceEvents.keep_float64_copies`) and ``weight_buffer``: only the
    index's order and levels go up (8 bytes per event), not the seven sorted arrays.

    Parameters
    ----------
    events
        The events on the device (times, locations in float64, working precision).
    index
        The grid index of the events' current locations.
    arrays
        Its :func:`index_arrays` with the weights ``weight_buffer`` holds.
    origin
        ``(x0, y0)``, the corner of every level's grid.
    weight_buffer
        ``w_m`` on the device: densities (model 2) or ones, float64.
    floor : (levels,) float64
        The smallest density of each density level.
    """
    up = events.upload
    n = events.n
    mc0, mk0 = index.expanded
    slots_pre = n + index.cell_key.size + 1
    hs = up(index.h)
    st, sxr, syr, sw, std, swd, sq, enx, eny = _gather_sources(
        events, index, arrays, hs, origin, weight_buffer
    )
    return IndexBuffers(
        st=st, sxr=sxr, syr=syr, sw=sw, std=std, swd=swd, sq=sq,
        ckey=up(index.cell_key.astype(np.int64)),
        cbeg=up(index.cell_begin),
        cdlo=up(arrays.cdlo),
        cdhi=up(arrays.cdhi),
        loff=up(index.level_offset),
        hs=hs,
        dlo=up(floor[index.band]),
        enx=enx,
        eny=eny,
        moff=up(arrays.moff),
        mom=events.output(8 * kernels.HERMITE_ORDER**2 * int(arrays.moff[-1]), read=True),
        pre=events.output(8 * slots_pre, read=True),
        pre16=events.output(16 * 8 * slots_pre, read=True),
        mc0=mc0,
        mk0=mk0,
    )  # fmt: skip


def _gather_sources(
    events: DeviceEvents,
    index: GridIndex,
    arrays: IndexArrays,
    hs: Buffer,
    origin: tuple[float, float],
    weight_buffer: Buffer,
) -> tuple[Buffer, ...]:
    """The sources in ``index``'s order on the device (kernel ``index_sources``): ``st, sxr,
    syr, sw`` (working precision, padded), ``std, swd`` (float64), ``sq`` (uint8), ``enx,
    eny`` (float64, padded) as :class:`IndexBuffers` names them (``hs``: the cell sizes)."""
    up, real, out = events.upload, events.real, events.output
    n, mk0 = events.n, index.expanded[1]
    size = np.dtype(real).itemsize * (n + _PAD)
    st, sxr, syr, sw = (out(size, read=True) for _ in range(4))
    std, swd = out(8 * n, read=True), out(8 * n, read=True)
    sq = out(n, read=True)
    enx, eny = out(8 * (n - mk0 + _PAD), read=True), out(8 * (n - mk0 + _PAD), read=True)
    args = IndexSourcesArgs(
        up(arrays.order), up(arrays.level), hs,
        up(index.inv_h), events.buf_td, events.buf_xd, events.buf_yd, weight_buffer,
        float(origin[0]), float(origin[1]), n, n + _PAD, mk0, st, sxr, syr, sw, std, swd, sq,
        enx, eny,
    )  # fmt: skip
    kernel(events.program(), "index_sources")(events.queue, item_range(n + _PAD), None, args)
    return st, sxr, syr, sw, std, swd, sq, enx, eny


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
